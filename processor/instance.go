package processor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

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
