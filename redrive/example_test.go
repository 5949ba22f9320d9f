package redrive_test

import (
	"context"
	"log"
	"os"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/redrive"
)

// Re-drive the handler-error dead letters of a group once the handler is
// fixed; a second call would move nothing.
func ExampleRun() {
	rep, err := redrive.Run(context.Background(), redrive.Config{
		Brokers: []string{"kafka-1:9092"},
		Group:   "settlement-service",
		Reasons: []string{dedup.ReasonHandlerError},
	})
	if err != nil {
		log.Fatal(err)
	}
	rep.Print(os.Stdout, 20)
}
