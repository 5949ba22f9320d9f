package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/IBM/sarama"
)

// ErrInstanceFenced is what Run returns when another live instance joined
// the group with the same instance ID. Two instances must never share one:
// each would fence the other's transactions and group membership in turn,
// so the older one stops instead of taking its place back.
var ErrInstanceFenced = errors.New("fenced: another instance joined the group with this instance ID")

// fencedInstance is ErrInstanceFenced for member name when err (a session's
// end, a failed join or commit) says the coordinator fenced its static
// membership; nil otherwise.
func fencedInstance(err error, member, group string) error {
	if !errors.Is(err, sarama.ErrFencedInstancedId) {
		return nil
	}
	return fmt.Errorf("%w (group %s, member %s): two live instances must not share an instance ID; this one stops", ErrInstanceFenced, group, member)
}

// sessionFenced checks why a session ended.
func sessionFenced(ctx context.Context, member, group string) error {
	return fencedInstance(context.Cause(ctx), member, group)
}

// instanceID returns the id persisted in dir, creating it once. A restarted
// instance keeps its transactional ids, so its first InitProducerId fences
// its own predecessor at once instead of waiting out the transaction timeout.
// Deleting the state dir makes a new instance: safe, the old transactional
// ids then only expire.
func instanceID(dir string) (string, error) {
	path := filepath.Join(dir, "instance-id")
	data, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(data))
		if id == "" {
			return "", fmt.Errorf("%s is empty; delete it to get a new instance id", path)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", err
	}
	return id, os.Rename(tmp, path)
}
