package processor

import (
	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// scramClient makes sarama's SCRAM conversations with xdg-go/scram, the
// implementation sarama's own examples use; nil for mechanisms other than
// SCRAM.
func scramClient(m Mechanism) func() sarama.SCRAMClient {
	var hash scram.HashGeneratorFcn
	switch m {
	case SASLSCRAMSHA256:
		hash = scram.SHA256
	case SASLSCRAMSHA512:
		hash = scram.SHA512
	default:
		return nil
	}
	return func() sarama.SCRAMClient { return &scramConversation{hash: hash} }
}

// scramConversation is one authentication: Begin, then Step until Done.
type scramConversation struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (s *scramConversation) Begin(user, password, authzID string) error {
	client, err := s.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	s.conv = client.NewConversation()
	return nil
}

func (s *scramConversation) Step(challenge string) (string, error) { return s.conv.Step(challenge) }

func (s *scramConversation) Done() bool { return s.conv.Done() }
