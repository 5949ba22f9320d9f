package inbox

import (
	"context"
	"fmt"
	"time"
)

// Sweep deletes the group's rows older than the retention, in statements
// of at most SweepBatch rows, until none is left or ctx ends, and returns
// how many it deleted.
func (ib *Inbox) Sweep(ctx context.Context) (int64, error) {
	cutoff := time.Now().Add(-ib.cfg.Retention)
	var total int64
	for {
		res, err := ib.db.ExecContext(ctx, ib.sql.sweep, ib.cfg.Group, cutoff, ib.cfg.SweepBatch)
		if err != nil {
			return total, fmt.Errorf("inbox: sweep: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("inbox: sweep: %w", err)
		}
		total += n
		ib.metrics.swept.Add(float64(n))
		if n < int64(ib.cfg.SweepBatch) {
			return total, nil
		}
	}
}

// RunSweeper sweeps every SweepInterval and counts the group's rows for the
// dedup_inbox_rows gauge, until ctx ends. Run it beside the processor in one
// instance or in each: concurrent sweeps delete each row once.
func (ib *Inbox) RunSweeper(ctx context.Context) error {
	tick := time.NewTicker(ib.cfg.SweepInterval)
	defer tick.Stop()
	for {
		if _, err := ib.Sweep(ctx); err != nil && ctx.Err() == nil {
			ib.cfg.Logger.Warn("inbox sweep failed; retrying at the next interval", "table", ib.cfg.Table, "err", err)
		}
		var rows int64
		if err := ib.db.QueryRowContext(ctx, ib.sql.count, ib.cfg.Group).Scan(&rows); err == nil {
			ib.metrics.rows.Set(float64(rows))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
