package main

import (
	"net/http"

	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/atleastonce"
	"github.com/dedupkit/dedup/internal/tablefile"
)

// seenHandler answers GET /v1/seen/{id}[?source=ce_source] from the goka
// runtime's table, in the exactly-once runtime's format
// (processor.HTTPHandler).
func seenHandler(r *atleastonce.Runner) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		ans := tablefile.Answer{ID: req.PathValue("id")}
		v, err := r.Get(tablefile.Key(req))
		rec, _ := v.(*codecs.SeenRecord)
		switch {
		case err != nil:
			ans.Note = "the key's partition is held by another instance: " + err.Error()
		case rec == nil:
			ans.Note = "not seen (or its partition is still recovering)"
		default:
			ans.Found, ans.Record = true, tablefile.ToJSON(rec)
		}
		tablefile.Write(w, ans, nil)
	}
}
