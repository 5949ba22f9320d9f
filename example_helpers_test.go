package dedup_test

import (
	"encoding/json"

	"github.com/dedupkit/dedup/internal/wire"
)

func envelope(payload string) *wire.Event { return &wire.Event{Payload: json.RawMessage(payload)} }
