#!/bin/sh
# The local stack's load: OrderPaid events to the input topic with the
# duplicates a producer that retries makes, so the workers have something to
# skip (dedup_duplicates_skipped_total). POSIX sh: it runs in the apache/kafka
# image, whose shell is BusyBox's.
#
# After every LOAD_DUPLICATE_EVERY-th event (default 5) the event sent three
# before it goes again, the same key and value: one record in six is a copy.
# Events are sent in batches of LOAD_BATCH with LOAD_PAUSE seconds between
# them, so the dashboards show a rate rather than one spike. Their IDs start
# with the time of the run: a second run sends new events.
#
#   LOAD_OUTPUT=- sh load.sh   writes the records (key|value) to stdout instead
set -eu

brokers=${LOAD_BROKERS:-kafka:19092}
topic=${LOAD_TOPIC:-orders}
total=${LOAD_EVENTS:-20000}
batch=${LOAD_BATCH:-500}
pause=${LOAD_PAUSE:-1}
every=${LOAD_DUPLICATE_EVERY:-5}
run=${LOAD_RUN:-$(date -u +%Y%m%d%H%M%S)}
# One time for all: a copy must be its original, byte for byte.
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# event N prints event N as key|value; the key is its order, as the value's
# aggregateId.
event() {
	order=$(($1 % 97))
	printf 'order-%d|{"eventId":"%s-%d","aggregateId":"order-%d","type":"OrderPaid","occurredAt":"%s","payload":{"orderId":"order-%d","amount":%d.%02d}}\n' \
		"$order" "$run" "$1" "$order" "$now" "$order" $(($1 % 500)) $(($1 % 100))
}

events() {
	i=0
	copies=0
	while [ "$i" -lt "$total" ]; do
		i=$((i + 1))
		event "$i"
		if [ $((i % every)) -eq 0 ] && [ "$i" -gt 3 ]; then
			event $((i - 3))
			copies=$((copies + 1))
		fi
		if [ $((i % batch)) -eq 0 ]; then
			sleep "$pause"
		fi
	done
	echo "load: sent $total events and $copies copies to $topic" >&2
}

if [ "${LOAD_OUTPUT:-}" = "-" ]; then
	events
	exit 0
fi
events | /opt/kafka/bin/kafka-console-producer.sh --bootstrap-server "$brokers" --topic "$topic" \
	--property parse.key=true --property key.separator='|'
