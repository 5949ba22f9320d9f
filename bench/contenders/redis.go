package contenders

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/redis/go-redis/v9"

	"github.com/dedupkit/dedup/internal/wire"
)

// redisStage is the @IdempotentConsumer pattern of the seed document, done
// in Go: SET idempotency:<consumer>:<eventId> NX EX ttl before the handler;
// a key that exists means a duplicate (skip); a handler error deletes the key
// so a redelivery can run. The output is produced after the handler and the
// input offset marked once it is acknowledged (runPipe).
//
// Its windows, for the record: a worker that dies after SET and before its
// output was acknowledged leaves a "zombie" key, so the redelivered event is
// skipped (lost) until the TTL passes; a duplicate arriving after the TTL is
// processed again.
type redisStage struct {
	rdb     *redis.Client
	cfg     Config
	decoder wire.Decoder
}

func newRedisStage(ctx context.Context, cfg Config) (*redisStage, error) {
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, PoolSize: 32})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", cfg.RedisAddr, err)
	}
	return &redisStage{rdb: rdb, cfg: cfg, decoder: wire.Decoder{ID: wire.DefaultIDSource()}}, nil
}

// RedisKey is the idempotency key of an event for a consumer.
func RedisKey(consumer, eventID string) string { return "idempotency:" + consumer + ":" + eventID }

func (s *redisStage) Process(ctx context.Context, msg *sarama.ConsumerMessage) (bool, error) {
	ev, err := s.decoder.Decode(msg.Value, nil)
	if err != nil {
		return false, fmt.Errorf("decode: %w", err)
	}
	key := RedisKey(s.cfg.Group, ev.EventID)
	first, err := s.rdb.SetNX(ctx, key, "1", s.cfg.RedisTTL).Result()
	if err != nil {
		return false, fmt.Errorf("redis SET NX: %w", err)
	}
	if !first {
		return false, nil // duplicate: skip
	}
	if err := forwardHandler(ev); err != nil {
		// Release the key so the redelivery is processed, then fail.
		if derr := s.rdb.Del(context.WithoutCancel(ctx), key).Err(); derr != nil {
			return false, fmt.Errorf("handler: %w (and DEL failed: %v)", err, derr)
		}
		return false, fmt.Errorf("handler: %w", err)
	}
	return true, nil
}

func (s *redisStage) Close() error { return s.rdb.Close() }

// forwardHandler is the business handler of every contender: output = the
// input event. It cannot fail; the error path is there for the pattern.
func forwardHandler(ev *wire.Event) error {
	if len(ev.Raw) == 0 {
		return fmt.Errorf("event %s has no body", ev.EventID)
	}
	return nil
}
