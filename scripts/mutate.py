#!/usr/bin/env python3
"""make mutate: plants one realistic bug at a time from a curated list and
checks that the test suite notices (docs/testing.md).

Each row of the list (tests/mutations/mutations.tsv) names a file, a line of
it (its content, without the leading indentation), the line that replaces it
and the ctest tests expected to catch it. For each row, in turn: the line is
found by its content (exactly once, or the run stops and says so: files move
between directories, their lines do not), replaced in place keeping its
indentation, the build updated incrementally, the named tests run; when they
all pass, the whole ctest suite runs. A mutation is killed when a test fails,
survives when none does. The file is put back before the next row, also when
the run is interrupted (a signal, an exception); a run killed with SIGKILL
leaves a note that the next run restores first.

No mutation tester for C installs here from Debian or npm (Mull and the
LLVM-based tools are not packaged; Stryker mutates JavaScript only), so the
list is curated by hand and this script applies it.

Prints one line per row, each survivor, and `figure mutation_score PERCENT`;
exits 1 below --threshold (percent, default 90), 2 when a row cannot be
applied (its line is missing or not unique, its mutation does not build).
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RowError(Exception):
    pass


def die(msg):
    print("mutate: " + msg, file=sys.stderr)
    sys.exit(2)


def read_rows(path):
    """The rows of the list: id, file, original, mutated, tests, behaviour."""
    rows = []
    with open(path, encoding="utf-8") as fp:
        for n, raw in enumerate(fp, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 6:
                die("%s:%d: %d columns, expected 6 (id, file, original line, mutated line, tests, "
                    "behaviour), separated by tabs" % (path, n, len(cols)))
            rid, file, orig, mut, tests, why = cols
            if orig.strip() != orig or mut.strip() != mut or not orig:
                die("%s:%d: %s: give the lines without leading or trailing blanks" % (path, n, rid))
            if orig == mut:
                die("%s:%d: %s: the mutated line is the original" % (path, n, rid))
            rows.append({"id": rid, "file": file, "orig": orig, "mut": mut,
                         "tests": [t for t in tests.split(",") if t], "why": why, "where": n})
    ids = [r["id"] for r in rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        die("%s: ids used twice: %s" % (path, ", ".join(dup)))
    return rows


def suggest(orig):
    """Tracked files holding the line, for a row whose file moved."""
    out = subprocess.run(["git", "-C", SRC, "grep", "-l", "-F", "--", orig],
                         capture_output=True, text=True).stdout.split()
    return out


def locate(row):
    """(path, lines, index) of the row's line; dies unless found exactly once."""
    path = os.path.join(SRC, row["file"])
    if not os.path.isfile(path):
        where = suggest(row["orig"])
        raise RowError("%s: %s does not exist%s" % (row["id"], row["file"],
                                         "; the line is in " + ", ".join(where) +
                                         ": update the file column" if where else ""))
    with open(path, encoding="utf-8") as fp:
        lines = fp.read().split("\n")
    hits = [i for i, l in enumerate(lines) if l.strip() == row["orig"]]
    if len(hits) != 1:
        where = suggest(row["orig"])
        raise RowError("%s: the line %r is in %s %d times, expected once%s" %
            (row["id"], row["orig"], row["file"], len(hits),
             " (it is in " + ", ".join(where) + ")" if where and not hits else
             "; make the row's line longer or the code's lines distinct"))
    return path, lines, hits[0]


class Planted:
    """One mutation in place; the original back on exit, whatever happens."""
    note = None

    def __init__(self, row, build):
        self.path, lines, i = locate(row)
        with open(self.path, encoding="utf-8") as fp:
            self.original = fp.read()
        indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
        lines[i] = indent + row["mut"]
        self.mutated = "\n".join(lines)
        self.stat = os.stat(self.path)
        Planted.note = os.path.join(build, "mutate-restore.json")

    def __enter__(self):
        with open(Planted.note, "w", encoding="utf-8") as fp:
            json.dump({"path": self.path, "text": self.original}, fp)
        with open(self.path, "w", encoding="utf-8") as fp:
            fp.write(self.mutated)
        return self

    def __exit__(self, *exc):
        with open(self.path, "w", encoding="utf-8") as fp:
            fp.write(self.original)
        os.chmod(self.path, self.stat.st_mode & 0o7777)
        os.unlink(Planted.note)
        return False


def restore_leftover(build):
    note = os.path.join(build, "mutate-restore.json")
    if os.path.exists(note):
        with open(note, encoding="utf-8") as fp:
            left = json.load(fp)
        with open(left["path"], "w", encoding="utf-8") as fp:
            fp.write(left["text"])
        os.unlink(note)
        print("mutate: restored %s, left mutated by an interrupted run" % left["path"])


def sh(cmd, log, timeout=None):
    with open(log, "a", encoding="utf-8") as fp:
        fp.write("$ %s\n" % " ".join(shlex.quote(c) for c in cmd))
        fp.flush()
        try:
            return subprocess.run(cmd, stdout=fp, stderr=subprocess.STDOUT, cwd=SRC,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            fp.write("mutate: timed out after %s s\n" % timeout)
            return 124


def build(args, log):
    return sh(["cmake", "--build", args.build, "-j", str(args.jobs)], log)


def ctest(args, log, names=None):
    cmd = ["ctest", "--test-dir", args.build, "--output-on-failure", "-j", str(args.jobs)]
    if names:
        cmd += ["-R", "^(%s)$" % "|".join(names)]
    return sh(cmd, log, timeout=args.suite_timeout)


def failed_tests(log_text):
    """The names ctest listed as failed in its last summary."""
    out, on = [], False
    for l in log_text.split("\n"):
        if l.startswith("The following tests FAILED"):
            on, out = True, []
        elif on and " - " in l:
            out.append(l.split(" - ", 1)[1].split(" (")[0].strip())
        elif on and not l.strip().startswith(tuple("0123456789")):
            on = False
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", default=os.path.join(SRC, "tests/mutations/mutations.tsv"))
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--threshold", type=float, default=90.0)
    ap.add_argument("--only", default="", help="comma-separated row ids")
    ap.add_argument("--no-suite", action="store_true",
                    help="do not run the whole suite for a row its tests miss (it counts as "
                         "surviving)")
    ap.add_argument("--check", action="store_true",
                    help="only check that every row applies (its line is there exactly once)")
    ap.add_argument("--suite-timeout", type=int, default=1800)
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)

    rows = read_rows(args.list)
    if args.only:
        want = set(args.only.split(","))
        missing = want - {r["id"] for r in rows}
        if missing:
            die("no such row: %s" % ", ".join(sorted(missing)))
        rows = [r for r in rows if r["id"] in want]
    if not os.path.isdir(args.build):
        die("%s is not a build directory: run make build first" % args.build)
    restore_leftover(args.build)
    bad = []
    for r in rows:  # every row applies before anything is changed
        try:
            locate(r)
        except RowError as e:
            bad.append(str(e))
    listed = subprocess.run(["ctest", "--test-dir", args.build, "-N"], capture_output=True,
                            text=True).stdout
    known = {l.split(":", 1)[1].strip() for l in listed.split("\n") if l.strip().startswith("Test")
             and ":" in l}
    for r in rows:
        unknown = [t for t in r["tests"] if t not in known]
        if unknown:
            bad.append("%s: no such ctest test: %s" % (r["id"], ", ".join(unknown)))
    if bad:
        die("%d row(s) of %s do not apply:\n  " % (len(bad), args.list) + "\n  ".join(bad))
    if args.check:
        print("mutate: all %d rows apply" % len(rows))
        return 0

    # SIGTERM and SIGHUP unwind like Ctrl-C, so the planted line goes back
    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)

    log = os.path.join(args.build, "mutate.log")
    open(log, "w").close()
    print("mutate: %d mutations; details in %s" % (len(rows), log))
    if build(args, log) != 0:
        die("the unmutated tree does not build; see %s" % log)

    killed, survived, broken = [], [], []
    t_all = time.monotonic()
    try:
        for r in rows:
            t0 = time.monotonic()
            with open(log, "a") as fp:
                fp.write("\n==== %s (%s): %s -> %s\n" % (r["id"], r["file"], r["orig"], r["mut"]))
            with Planted(r, args.build):
                if build(args, log) != 0:
                    broken.append(r)
                    verdict = "DOES NOT BUILD"
                else:
                    size = os.path.getsize(log)
                    if r["tests"] and ctest(args, log, r["tests"]) != 0:
                        killed.append(r)
                        verdict = "killed by " + ",".join(r["tests"])
                    elif args.no_suite:
                        survived.append(r)
                        verdict = "SURVIVED its tests"
                    else:
                        size = os.path.getsize(log)
                        if ctest(args, log) != 0:
                            with open(log, encoding="utf-8", errors="replace") as fp:
                                fp.seek(size)
                                by = failed_tests(fp.read())
                            killed.append(r)
                            verdict = "killed by the suite (%s), not by its tests %s" % (
                                ",".join(by) or "?", ",".join(r["tests"]) or "(none)")
                        else:
                            survived.append(r)
                            verdict = "SURVIVED the whole suite"
            print("%-24s %-28s %4.0f s  %s" % (r["id"], r["file"], time.monotonic() - t0, verdict),
                  flush=True)
    except KeyboardInterrupt:
        print("mutate: interrupted; the file is restored", file=sys.stderr)
        build(args, log)
        return 130
    build(args, log)  # the build dir matches the sources again

    done = len(killed) + len(survived)
    score = 100.0 * len(killed) / done if done else 0.0
    for r in survived:
        print("survivor %s: %s: %s -> %s (%s)" % (r["id"], r["file"], r["orig"], r["mut"], r["why"]))
    for r in broken:
        print("does not build %s: %s: %s -> %s: fix the row" % (r["id"], r["file"], r["orig"],
                                                               r["mut"]))
    print("mutate: %d killed, %d survived, %d not built, in %.0f s" %
          (len(killed), len(survived), len(broken), time.monotonic() - t_all))
    print("figure mutation_score %.1f" % score)
    if broken:
        return 2
    return 0 if score >= args.threshold else 1


if __name__ == "__main__":
    sys.exit(main())
