package dedupkit.bench.kstreams;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.CommitMode;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import sun.misc.Signal;

/**
 * The slow-handler benchmark's Confluent Parallel Consumer contender
 * (docs/benchmarks-slow.md): each input record's handler sleeps --sleep-ms
 * (Thread.sleep), then forwards the record (key, value and headers) to the
 * output, up to --concurrency records at once in any order (UNORDERED), in
 * Parallel Consumer's transactional mode (PERIODIC_TRANSACTIONAL_PRODUCER: the
 * outputs and the consumed offsets commit in one Kafka transaction). It keeps no
 * state, so it does not drop duplicate events: the harness counts its outputs per
 * input record, as for the raw pipe.
 *
 * <p>Options as DedupStreams (--application-id is the consumer group, --mode,
 * --threads and --state-dir are ignored). It prints READY once partitions are
 * assigned and closes on SIGTERM or SIGINT, exiting 0.
 */
public final class ParallelSleep {
  public static void main(String[] args) throws InterruptedException {
    Map<String, String> opt;
    try {
      opt = DedupStreams.parse(args);
    } catch (IllegalArgumentException e) {
      System.err.println("parallel-sleep: " + e.getMessage());
      System.err.println(DedupStreams.USAGE);
      System.exit(2);
      return;
    }
    String output = opt.get("output");
    long sleepMs = Long.parseLong(opt.get("sleep-ms"));

    Properties c = new Properties();
    c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opt.get("brokers"));
    c.put(ConsumerConfig.GROUP_ID_CONFIG, opt.get("application-id"));
    c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, opt.get("session-timeout-ms"));
    c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, opt.get("brokers"));
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, opt.get("application-id") + "-pc");
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

    ParallelConsumerOptions<byte[], byte[]> options = ParallelConsumerOptions.<byte[], byte[]>builder()
        .consumer(new KafkaConsumer<>(c))
        .producer(new KafkaProducer<>(p))
        .commitMode(CommitMode.PERIODIC_TRANSACTIONAL_PRODUCER)
        .ordering(ProcessingOrder.UNORDERED)
        .maxConcurrency(Integer.parseInt(opt.get("concurrency")))
        .commitInterval(Duration.ofMillis(Long.parseLong(opt.get("commit-interval-ms"))))
        .build();
    ParallelStreamProcessor<byte[], byte[]> pc = ParallelStreamProcessor.createEosStreamProcessor(options);

    AtomicBoolean ready = new AtomicBoolean();
    pc.subscribe(List.of(opt.get("input")), new ConsumerRebalanceListener() {
      @Override
      public void onPartitionsRevoked(Collection<TopicPartition> parts) {}

      @Override
      public void onPartitionsAssigned(Collection<TopicPartition> parts) {
        if (!parts.isEmpty() && ready.compareAndSet(false, true)) {
          System.out.println("READY");
          System.out.flush();
        }
      }
    });
    pc.pollAndProduce(ctx -> {
      ConsumerRecord<byte[], byte[]> r = ctx.getSingleConsumerRecord();
      DedupStreams.sleep(sleepMs);
      return new ProducerRecord<>(output, null, r.key(), r.value(), r.headers());
    });

    CountDownLatch stop = new CountDownLatch(1);
    Signal.handle(new Signal("TERM"), s -> stop.countDown());
    Signal.handle(new Signal("INT"), s -> stop.countDown());
    while (!stop.await(200, java.util.concurrent.TimeUnit.MILLISECONDS)) {
      if (pc.isClosedOrFailed()) {
        System.err.println("parallel-sleep: the parallel consumer closed or failed");
        System.exit(1);
      }
    }
    pc.closeDontDrainFirst(Duration.ofSeconds(50));
    System.exit(0);
  }
}
