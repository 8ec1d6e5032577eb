#!/bin/sh
# The official OpenAI client from npm (pinned), for the serving tests, in
# the per-machine cache (scripts/npm-cache.sh); prints its node_modules
# folder (NODE_PATH). [--path]: only where it would be.
set -eu
VER="${CORRAL_OPENAI_VERSION:-4.104.0}"
exec "$(dirname "$0")/npm-cache.sh" ${1:+"$1"} "openai-$VER" "openai@$VER"
