#!/usr/bin/env bash
# Scripts end processes by pid, never by name (issue 12; STYLE.md rule 14):
# no project script, test, benchmark or make rule runs pkill, killall,
# pgrep or pidof, which match other people's processes as well as ours
# (another user's corrald, another test's head). Fails naming each line.
set -u
: "${CORRAL_SOURCE_DIR:?}"
cd "$CORRAL_SOURCE_DIR" || exit 1
self=tests/cli/kill_by_pid.sh
files() { # the tree's files (a tree without git: find, less build folders)
    git ls-files -co --exclude-standard -- scripts tests bench examples deploy python .ci \
        Makefile '*.sh' '*.py' '*.mjs' '*.js' '*.mk' 2>/dev/null ||
        find . -path './build*' -prune -o -type f -print | sed 's|^\./||'
}
[ "$(files | wc -l)" -gt 10 ] || { echo "FAIL: no files of the tree found in $PWD"; exit 1; }
found=$(files | sort -u |
    grep -v -e "^$self\$" -e '^tests/fixtures/' -e '/node_modules/' |
    while read -r f; do
        [ -f "$f" ] || continue
        case "$f" in
        *.sh | *.py | *.mjs | *.js | *.mk | Makefile | */Makefile | scripts/* | .ci/*) ;;
        *) continue ;;
        esac
        grep -nHE '(^|[^[:alnum:]_./-])(pkill|killall|pgrep|pidof)([^[:alnum:]_-]|$)' "$f"
    done)
if [ -n "$found" ]; then
    echo "FAIL: processes found or ended by name (end them by the pid you started, checked):"
    echo "$found"
    exit 1
fi
echo "kill_by_pid: no script ends processes by name"
