# The per-package table `make test` ends each module with, run by gotestsum
# as its --post-run-command: from the go test -json events in
# $GOTESTSUM_JSONFILE, each package's passed, skipped and failed tests
# (subtests count on their own), its time and its result: ok, FAIL, build
# failed, no test files, or no result when go test never reported it. A test
# that started and never ended (its binary died) counts as failed.
# POSIX awk: match() and substr() only, no gawk extensions.

# field is the value of a string or number field of the event on this line.
function field(name,    s) {
	if (!match($0, "\"" name "\":(\"[^\"]*\"|[-0-9.e+]+)")) return ""
	s = substr($0, RSTART + length(name) + 3, RLENGTH - length(name) - 3)
	gsub(/^"|"$/, "", s)
	return s
}

BEGIN { ARGV[1] = ENVIRON["GOTESTSUM_JSONFILE"]; ARGC = 2; width = length("PACKAGE") }

{
	action = field("Action")
	if (action !~ /^(start|run|pass|skip|fail)$/) next
	pkg = field("Package"); test = field("Test")
	if (pkg == "") next
	if (!(pkg in result)) {
		order[n++] = pkg; result[pkg] = "no result"
		if (length(pkg) > width) width = length(pkg)
	}
	if (test != "") {
		if (action == "run") running[pkg, test] = 1
		else { count[pkg, action]++; delete running[pkg, test] }
	} else if (action != "start") {
		result[pkg] = action == "pass" ? "ok" : action == "skip" ? "no test files" : \
			field("FailedBuild") != "" ? "build failed" : "FAIL"
		elapsed[pkg] = sprintf("%.1fs", field("Elapsed"))
	}
}

END {
	for (k in running) { split(k, p, SUBSEP); count[p[1], "fail"]++ }
	row = "%-" width "s  %6s  %7s  %6s  %8s  %s\n"
	printf "\n" row, "PACKAGE", "PASSED", "SKIPPED", "FAILED", "TIME", "RESULT"
	for (i = 0; i < n; i++) {
		pkg = order[i]
		printf row, pkg, count[pkg, "pass"] + 0, count[pkg, "skip"] + 0, count[pkg, "fail"] + 0, elapsed[pkg], result[pkg]
		total["pass"] += count[pkg, "pass"]; total["skip"] += count[pkg, "skip"]; total["fail"] += count[pkg, "fail"]
	}
	line = sprintf(row, "TOTAL", total["pass"] + 0, total["skip"] + 0, total["fail"] + 0, "", "")
	sub(/ +\n$/, "\n", line); printf "%s", line
}
