package codecs

import (
	"encoding/json"
	"strings"
)

// splitPath splits a dotted JSON path into its first member name and the
// rest ("" for a top-level field).
func splitPath(path string) (head, rest string) {
	head, rest, _ = strings.Cut(path, ".")
	return head, rest
}

// lookupPath finds the member at the dotted path rest inside the raw JSON
// value raw (already validated by scanObject). found is false when a step
// is missing or is not an object; null along the way counts as missing.
func lookupPath(raw []byte, rest string) (value []byte, found bool) {
	for rest != "" {
		if len(raw) == 0 || raw[0] != '{' {
			return nil, false
		}
		var name string
		name, rest = splitPath(rest)
		var next []byte
		err := scanObject(raw, func(key []byte, escaped bool, v []byte) error {
			if escaped {
				var s string
				if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &s) != nil {
					return errSyntax
				}
				key = []byte(s)
			}
			if string(key) == name {
				next = v // the last one counts, as at the top level
			}
			return nil
		})
		if err != nil || next == nil {
			return nil, false
		}
		raw = next
	}
	return raw, true
}
