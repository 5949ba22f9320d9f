package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// errSyntax is what scanObject returns for anything encoding/json's Valid
// would refuse (or a valid document that is not an object).
var errSyntax = errors.New("invalid JSON")

// maxDepth matches encoding/json's nesting limit.
const maxDepth = 10000

// scanObject checks that data is exactly one JSON object, with the grammar of
// RFC 8259 as encoding/json.Valid applies it, and calls member with the raw
// key (quotes stripped, escapes left in) and the raw value of every top-level
// member, in order. It is one pass over the bytes with no allocation:
// encoding/json would validate the whole event, then validate and decode
// it again, a cost paid for every event.
func scanObject(data []byte, member func(key []byte, escaped bool, value []byte) error) error {
	s := scanner{data: data}
	s.space()
	if s.i >= len(s.data) || s.data[s.i] != '{' {
		return errSyntax
	}
	s.i++
	s.space()
	if s.peek() == '}' {
		s.i++
	} else {
		for {
			s.space()
			start := s.i
			escaped, err := s.string()
			if err != nil {
				return err
			}
			key := s.data[start+1 : s.i-1]
			s.space()
			if s.peek() != ':' {
				return errSyntax
			}
			s.i++
			s.space()
			vstart := s.i
			if err := s.value(1); err != nil {
				return err
			}
			if err := member(key, escaped, s.data[vstart:s.i]); err != nil {
				return err
			}
			s.space()
			c := s.peek()
			s.i++
			if c == '}' {
				break
			}
			if c != ',' {
				return errSyntax
			}
		}
	}
	s.space()
	if s.i != len(s.data) {
		return errSyntax
	}
	return nil
}

type scanner struct {
	data []byte
	i    int
}

// peek is the byte at i, or 0 at the end (never valid where it is asked).
func (s *scanner) peek() byte {
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) value(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested too deeply", errSyntax)
	}
	switch c := s.peek(); {
	case c == '"':
		_, err := s.string()
		return err
	case c == '{':
		return s.container('}', depth, true)
	case c == '[':
		return s.container(']', depth, false)
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	return errSyntax
}

// container scans an object (keyed) or an array after its opening byte.
func (s *scanner) container(end byte, depth int, keyed bool) error {
	s.i++
	s.space()
	if s.peek() == end {
		s.i++
		return nil
	}
	for {
		s.space()
		if keyed {
			if _, err := s.string(); err != nil {
				return err
			}
			s.space()
			if s.peek() != ':' {
				return errSyntax
			}
			s.i++
			s.space()
		}
		if err := s.value(depth + 1); err != nil {
			return err
		}
		s.space()
		c := s.peek()
		s.i++
		if c == end {
			return nil
		}
		if c != ',' {
			return errSyntax
		}
	}
}

func (s *scanner) literal(word string) error {
	if len(s.data)-s.i < len(word) || string(s.data[s.i:s.i+len(word)]) != word {
		return errSyntax
	}
	s.i += len(word)
	return nil
}

// string scans a string starting at its opening quote; escaped reports
// whether it holds any backslash escape.
func (s *scanner) string() (escaped bool, err error) {
	if s.peek() != '"' {
		return false, errSyntax
	}
	s.i++
	for s.i < len(s.data) {
		// Most bytes of a string stand for themselves: skip them eight at a
		// time, then one by one, before looking at the one that does not
		// (in locals, which the compiler keeps in registers).
		data, i := s.data, s.i
		for i+8 <= len(data) && !hasSpecialByte(binary.LittleEndian.Uint64(data[i:])) {
			i += 8
		}
		for i < len(data) && plainStringByte[data[i]] {
			i++
		}
		s.i = i
		if s.i == len(s.data) {
			break
		}
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped, nil
		case c < 0x20:
			return false, errSyntax
		case c == '\\':
			escaped = true
			s.i++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for k := 0; k < 4; k++ {
					if !isHex(s.peek()) {
						return false, errSyntax
					}
					s.i++
				}
			default:
				return false, errSyntax
			}
		default:
			s.i++
		}
	}
	return false, errSyntax
}

// plainStringByte marks the bytes a JSON string holds as they are: not a
// quote, not a backslash, not a control character. Read-only.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// hasSpecialByte reports whether any of the eight bytes in v is a quote, a
// backslash or a control character (below 0x20), the bytes plainStringByte
// refuses. It is exact: each term is nonzero only for a byte that is below
// 0x20, or zero after the xor with '"' or '\\'.
func hasSpecialByte(v uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := v^(ones*'"'), v^(ones*'\\')
	return ((v-ones*0x20)&^v|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func (s *scanner) digits() int {
	n := 0
	for c := s.peek(); c >= '0' && c <= '9'; c = s.peek() {
		s.i++
		n++
	}
	return n
}

func (s *scanner) number() error {
	if s.peek() == '-' {
		s.i++
	}
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return errSyntax
	}
	if s.peek() == '.' {
		s.i++
		if s.digits() == 0 {
			return errSyntax
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if s.digits() == 0 {
			return errSyntax
		}
	}
	return nil
}
