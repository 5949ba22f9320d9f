package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/netfault"
)

// cluster is the Kafka a scenario runs on: one the driver started with
// integration/kafka/kafka.sh, or one given by --brokers (script empty).
type cluster struct {
	brokers []string
	nodes   int
	// proxyRoutes reach every broker through a listener that advertises the
	// fault proxy's address (kafka.sh proxy-routes); nil for an external cluster.
	proxyRoutes []netfault.Route
	script      string   // kafka.sh; empty for an external cluster
	env         []string // KAFKA_* for kafka.sh
	log         io.Writer
}

// externalCluster uses brokers as they are; nothing is started or killed.
func externalCluster(brokers []string) *cluster {
	return &cluster{brokers: brokers, nodes: 1}
}

// startCluster wipes cfg.KafkaData and starts a fresh cluster there.
func startCluster(cfg *Config, root string, log io.Writer) (*cluster, error) {
	data := cfg.KafkaData
	if !filepath.IsAbs(data) {
		data = filepath.Join(root, data)
	}
	c := &cluster{nodes: cfg.Nodes, script: filepath.Join(root, "integration", "kafka", "kafka.sh"), log: log,
		env: append(os.Environ(),
			"KAFKA_NODES="+strconv.Itoa(cfg.Nodes),
			"KAFKA_PORT="+strconv.Itoa(cfg.KafkaPort),
			"KAFKA_DATA="+data,
			// A broker restarting next to a loaded cluster on a small machine can take minutes.
			"KAFKA_START_TIMEOUT=300",
			// A killed broker is declared dead after 6 s instead of 9 s.
			"KAFKA_EXTRA_PROPS=broker.session.timeout.ms=6000 broker.heartbeat.interval.ms=1000")}
	if err := c.run("clean"); err != nil {
		return nil, err
	}
	if err := c.run("up"); err != nil {
		return nil, err
	}
	out, err := c.output("brokers")
	if err != nil {
		return nil, err
	}
	c.brokers = splitList(strings.TrimSpace(out))
	if out, err = c.output("proxy-routes"); err != nil {
		return nil, err
	}
	if c.proxyRoutes, err = netfault.ParseRoutes(strings.TrimSpace(out)); err != nil {
		return nil, fmt.Errorf("kafka.sh proxy-routes: %w", err)
	}
	return c, nil
}

func (c *cluster) own() bool { return c.script != "" }

// killNode SIGKILLs broker n; startNode restarts it and waits until it is ready.
func (c *cluster) killNode(n int) error  { return c.run("kill", strconv.Itoa(n)) }
func (c *cluster) startNode(n int) error { return c.run("start", strconv.Itoa(n)) }

// stop stops the driver's cluster; clean also deletes its data.
func (c *cluster) stop(clean bool) error {
	if !c.own() {
		return nil
	}
	if clean {
		return c.run("clean")
	}
	return c.run("down")
}

func (c *cluster) run(args ...string) error {
	cmd := exec.Command(c.script, args...)
	cmd.Env = c.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, c.log), io.MultiWriter(&out, c.log)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kafka.sh %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

func (c *cluster) output(args ...string) (string, error) {
	cmd := exec.Command(c.script, args...)
	cmd.Env = c.env
	cmd.Stderr = c.log
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kafka.sh %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// createInput creates the input topic with the broker defaults (replication
// factor and min.insync.replicas) and waits until every broker knows it with
// a leader for each partition: creation is asynchronous, and a worker that
// asks a broker that has not caught up yet refuses a "missing" input.
func (c *cluster) createInput(topic string, partitions int) error {
	if err := kafkatest.CreateTopic(c.brokers, topic, int32(partitions)); err != nil {
		return err
	}
	client, err := sarama.NewClient(c.brokers, kafkatest.Config())
	if err != nil {
		return err
	}
	defer client.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		missing := ""
		for _, b := range client.Brokers() {
			if ok, err := knowsTopic(b, client.Config(), topic, partitions); !ok {
				missing = fmt.Sprintf("broker %s (%v)", b.Addr(), err)
				break
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s: %s does not know it with %d led partitions a minute after its creation", topic, missing, partitions)
		}
		time.Sleep(100 * time.Millisecond) // polling the brokers for a condition
	}
}

func knowsTopic(b *sarama.Broker, conf *sarama.Config, topic string, partitions int) (bool, error) {
	if err := b.Open(conf); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
		return false, err
	}
	resp, err := b.GetMetadata(sarama.NewMetadataRequest(conf.Version, []string{topic}))
	if err != nil {
		return false, err
	}
	if len(resp.Topics) == 0 {
		return false, nil
	}
	t := resp.Topics[0] // the only topic asked for
	if t.Name != topic || !errors.Is(t.Err, sarama.ErrNoError) || len(t.Partitions) != partitions {
		return false, t.Err
	}
	for _, p := range t.Partitions {
		if p.Leader < 0 {
			return false, p.Err
		}
	}
	return true, nil
}

// durability describes the replication of topics, e.g.
// "orders RF 3 min.insync 2", so a report shows what the run really had.
func (c *cluster) durability(topics ...string) (string, error) {
	admin, err := sarama.NewClusterAdmin(c.brokers, kafkatest.Config())
	if err != nil {
		return "", err
	}
	defer admin.Close()
	metas, err := admin.DescribeTopics(topics)
	if err != nil {
		return "", err
	}
	var out []string
	for _, m := range metas {
		if !errors.Is(m.Err, sarama.ErrNoError) || len(m.Partitions) == 0 {
			out = append(out, fmt.Sprintf("%s (%v)", m.Name, m.Err))
			continue
		}
		entries, err := kafkautil.TopicConfig(admin, m.Name, "min.insync.replicas")
		minISR := "?"
		if err == nil && len(entries) == 1 {
			minISR = entries[0].Value
		}
		out = append(out, fmt.Sprintf("%s: %d partitions, RF %d, min.insync %s", m.Name, len(m.Partitions), len(m.Partitions[0].Replicas), minISR))
	}
	return strings.Join(out, "; "), nil
}

// groupMembers is how many members group has and its state.
func (c *cluster) groupMembers(group string) (int, string, error) {
	admin, err := sarama.NewClusterAdmin(c.brokers, kafkatest.Config())
	if err != nil {
		return 0, "", err
	}
	defer admin.Close()
	gs, err := admin.DescribeConsumerGroups([]string{group})
	if err != nil {
		return 0, "", err
	}
	if len(gs) != 1 {
		return 0, "", fmt.Errorf("describe group %s: %d answers", group, len(gs))
	}
	return len(gs[0].Members), gs[0].State, nil
}

// waitGroup polls the group until cond(members, state) holds.
func (c *cluster) waitGroup(group string, timeout time.Duration, cond func(int, string) bool) (int, string, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, state, err := c.groupMembers(group)
		if err == nil && cond(n, state) {
			return n, state, nil
		}
		if time.Now().After(deadline) {
			return n, state, fmt.Errorf("group %s: %d members, state %s after %v (err %v)", group, n, state, timeout, err)
		}
		time.Sleep(200 * time.Millisecond) // polling the broker for a condition
	}
}
