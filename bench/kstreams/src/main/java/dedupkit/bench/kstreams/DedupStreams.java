package dedupkit.bench.kstreams;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import sun.misc.Signal;

/**
 * The benchmark's Kafka Streams contender: the worker's job written the way a
 * Kafka Streams user would. Each first-seen event (by the top-level JSON field
 * "eventId", as the worker's default decoder reads it) goes to the output once;
 * later copies are dropped. The seen IDs live in a persistent (RocksDB) store
 * with a changelog, under exactly_once_v2.
 *
 * <p>Mode "local" judges each event in its input partition's store (the input is
 * keyed by aggregate and every copy keeps its key: the worker's --rekey=never).
 * Mode "repartition" re-keys by event ID through a repartition topic first (the
 * worker's default --rekey=always).
 *
 * <p>With --sleep-ms, each first-seen event's processing sleeps that long (Thread.sleep) before it is
 * forwarded: the slow handler of docs/benchmarks-slow.md, one record at a time per stream thread.
 *
 * <p>It prints READY on stdout once the application is RUNNING, and closes
 * cleanly (final commit) on SIGTERM or SIGINT, exiting 0, as the harness expects
 * of every contender process.
 */
public final class DedupStreams {
  private static final Logger log = LoggerFactory.getLogger(DedupStreams.class);
  private static final String STORE = "table";
  private static final JsonFactory JSON = new JsonFactory();

  public static void main(String[] args) throws InterruptedException {
    Map<String, String> opt;
    try {
      opt = parse(args);
    } catch (IllegalArgumentException e) {
      System.err.println("dedup-kstreams: " + e.getMessage());
      System.err.println(USAGE);
      System.exit(2);
      return;
    }
    String mode = opt.get("mode");
    if (!mode.equals("local") && !mode.equals("repartition")) {
      System.err.println("dedup-kstreams: --mode " + mode + ": want local or repartition");
      System.exit(2);
    }
    long sleepMs = Long.parseLong(opt.get("sleep-ms"));
    KafkaStreams streams = new KafkaStreams(topology(opt.get("input"), opt.get("output"), mode, sleepMs), props(opt));

    CountDownLatch stop = new CountDownLatch(1);
    AtomicBoolean failed = new AtomicBoolean();
    AtomicBoolean ready = new AtomicBoolean();
    streams.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.RUNNING && ready.compareAndSet(false, true)) {
        System.out.println("READY");
        System.out.flush();
      }
      if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.PENDING_ERROR) {
        failed.set(true);
        stop.countDown();
      }
    });
    streams.setUncaughtExceptionHandler(e -> {
      log.error("stream thread failed", e);
      return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    // A signal handler rather than a shutdown hook: after a hook the JVM exits
    // 143, which the harness would report as a failed stop.
    // SIGUSR1 is a stop for good: close and leave the group, which a static
    // member does not do on a plain close (the worker's SIGUSR1 does the same).
    AtomicBoolean leave = new AtomicBoolean();
    Signal.handle(new Signal("TERM"), s -> stop.countDown());
    Signal.handle(new Signal("INT"), s -> stop.countDown());
    Signal.handle(new Signal("USR1"), s -> {
      leave.set(true);
      stop.countDown();
    });

    streams.start();
    stop.await();
    boolean closed = streams.close(new KafkaStreams.CloseOptions()
        .timeout(Duration.ofSeconds(50)).leaveGroup(leave.get()));
    if (!closed) {
      System.err.println("dedup-kstreams: not closed within 50 s");
    }
    System.exit(failed.get() || !closed ? 1 : 0);
  }

  /** The dedup graph of one mode. */
  static Topology topology(String input, String output, String mode, long sleepMs) {
    StreamsBuilder b = new StreamsBuilder();
    b.addStateStore(Stores.keyValueStoreBuilder(
        Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.Long()));
    KStream<byte[], byte[]> in = b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()));
    if (mode.equals("local")) {
      in.process(() -> new Dedup<byte[]>(r -> eventId(r.value()), sleepMs), STORE)
          .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
    } else {
      in.filter((k, v) -> eventId(v) != null) // no key to route by; dropped as in local mode
          .selectKey((k, v) -> eventId(v))
          .repartition(Repartitioned.<String, byte[]>as("loop").withKeySerde(Serdes.String()).withValueSerde(Serdes.ByteArray()))
          .process(() -> new Dedup<String>(Record::key, sleepMs), STORE)
          .to(output, Produced.with(Serdes.String(), Serdes.ByteArray()));
    }
    return b.build();
  }

  /**
   * Forwards a record (key, value and headers, so the harness's "bench-rec"
   * header comes along) the first time its event ID is seen, after sleeping sleepMs (0: none).
   */
  static final class Dedup<K> implements Processor<K, byte[], K, byte[]> {
    private static final AtomicInteger missing = new AtomicInteger();
    private final Function<Record<K, byte[]>, String> idOf;
    private final long sleepMs;
    private ProcessorContext<K, byte[]> ctx;
    private KeyValueStore<String, Long> seen;

    Dedup(Function<Record<K, byte[]>, String> idOf, long sleepMs) {
      this.idOf = idOf;
      this.sleepMs = sleepMs;
    }

    @Override
    public void init(ProcessorContext<K, byte[]> ctx) {
      this.ctx = ctx;
      this.seen = ctx.getStateStore(STORE);
    }

    @Override
    public void process(Record<K, byte[]> r) {
      String id = idOf.apply(r);
      if (id == null) {
        if (missing.incrementAndGet() % 1000 == 1) {
          log.warn("records without an eventId dropped: {}", missing.get());
        }
        return;
      }
      if (seen.putIfAbsent(id, r.timestamp()) == null) {
        sleep(sleepMs);
        ctx.forward(r);
      }
    }
  }

  /** Sleeps ms milliseconds; an interrupt fails the record (its transaction is not committed). */
  static void sleep(long ms) {
    if (ms <= 0) {
      return;
    }
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted in the handler's sleep", e);
    }
  }

  /** The top-level "eventId" string of a JSON object, or null. */
  static String eventId(byte[] value) {
    if (value == null) {
      return null;
    }
    try (JsonParser p = JSON.createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      for (JsonToken t = p.nextToken(); t == JsonToken.FIELD_NAME; t = p.nextToken()) {
        String name = p.currentName();
        JsonToken v = p.nextToken();
        if (name.equals("eventId")) {
          return v == JsonToken.VALUE_STRING && !p.getText().isEmpty() ? p.getText() : null;
        }
        p.skipChildren();
      }
    } catch (IOException e) {
      return null;
    }
    return null;
  }

  static Properties props(Map<String, String> opt) {
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, opt.get("application-id"));
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, opt.get("brokers"));
    p.put(StreamsConfig.STATE_DIR_CONFIG, opt.get("state-dir"));
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, opt.get("commit-interval-ms"));
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, opt.get("threads"));
    p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, opt.get("standby-replicas"));
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), opt.get("session-timeout-ms"));
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    long sleepMs = Long.parseLong(opt.get("sleep-ms"));
    if (sleepMs > 0) {
      // A stream thread processes its buffered records for up to half of
      // max.poll.interval.ms before it polls and looks at a close: with the
      // default (5 min) and a sleeping processor it went on through the
      // backlog for over 50 s after close. 10 s (or 3 sleeps) bounds that.
      p.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG),
          String.valueOf(Math.max(10_000, 3 * sleepMs)));
    }
    String instance = opt.get("group-instance-id");
    if (!instance.isEmpty()) {
      p.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), instance);
    }
    return p;
  }

  static final String USAGE = String.join("\n",
      "usage: java -jar dedup-kstreams.jar --brokers H:P --input T --output T --application-id G --state-dir D",
      "         [--mode local|repartition] [--commit-interval-ms 100] [--session-timeout-ms 45000]",
      "         [--standby-replicas 0] [--group-instance-id ID] [--threads 1] [--sleep-ms 0]",
      "         [--concurrency 1000] (ParallelSleep only)",
      "Each option may instead come from the environment: KSTREAMS_BROKERS, KSTREAMS_MODE, ...");

  /** Options from --name value pairs, then KSTREAMS_NAME variables, then defaults. */
  static Map<String, String> parse(String[] args) {
    Map<String, String> opt = new HashMap<>();
    opt.put("mode", "local");
    opt.put("commit-interval-ms", "100");
    opt.put("session-timeout-ms", "45000");
    opt.put("standby-replicas", "0");
    opt.put("group-instance-id", "");
    opt.put("threads", "1");
    opt.put("sleep-ms", "0");
    opt.put("concurrency", "1000");
    for (String k : new String[] {"brokers", "input", "output", "application-id", "state-dir", "mode",
        "commit-interval-ms", "session-timeout-ms", "standby-replicas", "group-instance-id", "threads",
        "sleep-ms", "concurrency"}) {
      String env = System.getenv("KSTREAMS_" + k.toUpperCase().replace('-', '_'));
      if (env != null) {
        opt.put(k, env);
      }
    }
    for (int i = 0; i < args.length; i += 2) {
      String k = args[i];
      if (!k.startsWith("--") || i + 1 >= args.length) {
        throw new IllegalArgumentException("bad option " + k);
      }
      opt.put(k.substring(2), args[i + 1]);
    }
    for (String k : new String[] {"brokers", "input", "output", "application-id", "state-dir"}) {
      if (opt.getOrDefault(k, "").isEmpty()) {
        throw new IllegalArgumentException("--" + k + " is required");
      }
    }
    return opt;
  }
}
