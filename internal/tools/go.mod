// The linters `make vet` runs, pinned here rather than in the library's
// go.mod so that users of the library never inherit their requirements:
//
//	go tool -modfile=internal/tools/go.mod staticcheck ./...
//
// Both tools share one build list, so staticcheck is built with the
// golang.org/x/tools that deadcode needs (newer than staticcheck's own
// minimum). Upgrade with `go get -tool <module>/cmd/<tool>@<version>` here.
module github.com/dedupkit/dedup/internal/tools

go 1.26.8

tool (
	golang.org/x/tools/cmd/deadcode
	honnef.co/go/tools/cmd/staticcheck
)

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/telemetry v0.0.0-20261009151841-97e8ea77aa2a // indirect
	golang.org/x/tools v0.52.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
)
