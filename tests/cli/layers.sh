#!/usr/bin/env bash
# The layers of DESIGN.md "Layers", as the build enforces them
# (CMakeLists.txt corral_layer): each library compiles against a view of
# the folders it may use, so an include of a higher layer fails. For each
# library, one file per folder of the tree includes a header of that
# folder and is compiled with the library's view: allowed folders must
# compile, every other must fail with "No such file" (not for another
# reason). The agent never sees head/.
set -u
: "${CORRAL_SOURCE_DIR:?}" "${CORRAL_BUILD_DIR:?}"
src=$CORRAL_SOURCE_DIR
layers=$CORRAL_BUILD_DIR/layers
cc=${CC:-cc}
flags="-fsyntax-only -D_GNU_SOURCE -std=gnu11 -I$src/include -I$CORRAL_BUILD_DIR/proto/gen"
flags="$flags $(pkg-config --cflags libuv jansson sqlite3 2>/dev/null)"
tmp=$(mktemp -d /tmp/corral-layers-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
# a header of each folder
declare -A hdr=([base]=base/base.h [hw]=hw/hw.h [sched]=sched/sched.h [net]=net/net.h
    [agent]=agent/agent.h [head]=head/head.h [client]=client/client_int.h [cli]=cli/cli.h
    [daemon]=daemon/harness.h [web]=web/web.h [serve]=serve/serve.h [worker]=worker/frame.h)
# library: the folders it may include (the rest must not be reachable)
declare -A may=([corral_base]="base" [corral_hw]="base hw" [corral_sched]="base hw sched"
    [corral_net]="base net" [corral_web]="base hw sched net web"
    [corral_agent]="base hw sched net web agent"
    [corral_head]="base hw sched net web agent head" [corral_client]="base hw sched net worker client"
    [corral_worker_obj]="base net worker"
    [corrald]="base hw sched net web agent head daemon"
    [corral_serve]="base hw serve" [corral_cli]="base hw sched net client cli"
    [corral-serve]="base hw sched net client cli serve")
for lib in "${!may[@]}"; do
    view=$layers/$lib
    if [ ! -d "$view" ]; then
        echo "FAIL: no view $view for $lib (CMakeLists.txt corral_layer)"
        fails=$((fails + 1))
        continue
    fi
    for folder in "${!hdr[@]}"; do
        f=$tmp/$lib-$folder.c
        printf '#include "%s"\n' "${hdr[$folder]}" >"$f"
        out=$($cc $flags -I"$view" "$f" 2>&1)
        rc=$?
        if [[ " ${may[$lib]} " == *" $folder "* ]]; then
            [ $rc -eq 0 ] || { echo "FAIL: $lib may include ${hdr[$folder]} but it does not compile: $out"; fails=$((fails + 1)); }
        elif [ $rc -eq 0 ]; then
            echo "FAIL: $lib can include ${hdr[$folder]}, a layer it must not use"
            fails=$((fails + 1))
        elif ! grep -q "No such file" <<<"$out"; then
            echo "FAIL: $lib including ${hdr[$folder]} failed for another reason: $out"
            fails=$((fails + 1))
        fi
    done
done
# and no file of agent/ names a head/ header at all
if grep -n '#include "head/' "$src"/agent/*.c "$src"/agent/*.h; then
    echo "FAIL: agent/ includes a head/ header"
    fails=$((fails + 1))
fi
[ $fails -eq 0 ] && echo "ok: every layer sees only the layers below it"
exit $((fails > 0))
