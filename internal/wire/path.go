package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// errDuplicate marks a step of an ID path that occurs twice in its object.
var errDuplicate = errors.New("duplicate member")

// splitPath splits a dotted JSON path into its first member name and the
// rest ("" for a top-level field).
func splitPath(path string) (head, rest string) {
	head, rest, _ = strings.Cut(path, ".")
	return head, rest
}

// lookupPath finds the member at the dotted path rest inside the raw JSON
// value raw (already validated by scanObject). found is false when a step
// is missing or is not an object; null along the way counts as missing. A
// step that occurs twice in its object is an error wrapping errDuplicate.
func lookupPath(raw []byte, rest string) (value []byte, found bool, err error) {
	for rest != "" {
		if len(raw) == 0 || raw[0] != '{' {
			return nil, false, nil
		}
		var name string
		name, rest = splitPath(rest)
		var next []byte
		count := 0
		err := scanObject(raw, func(key []byte, escaped bool, v []byte) error {
			if escaped {
				var s string
				if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &s) != nil {
					return errSyntax
				}
				key = []byte(s)
			}
			if string(key) == name {
				next = v
				count++
			}
			return nil
		})
		if err != nil || next == nil {
			return nil, false, nil
		}
		if count > 1 {
			return nil, false, fmt.Errorf("JSON field %q occurs more than once: %w", name, errDuplicate)
		}
		raw = next
	}
	return raw, true, nil
}
