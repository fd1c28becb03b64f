#!/bin/sh
# scripts/run.sh builds only what the main job needs: the targets it passes
# to scripts/build.sh link the xdit binary and compile no test source.
#   run_sh_targets.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1
build=$2
targets=$(sed -n 's|^bash scripts/build.sh \(.*\)$|\1|p' "$src/scripts/run.sh")
if [ -z "$targets" ]; then
  echo "scripts/run.sh calls scripts/build.sh without targets: it builds everything, tests included"
  exit 1
fi
# shellcheck disable=SC2086
cmds=$(ninja -C "$build" -t commands $targets)
tests=$(printf '%s\n' "$cmds" | grep -c -- ' -c [^ ]*/tests/' || true)
if [ "$tests" -ne 0 ]; then
  echo "scripts/run.sh's targets ($targets) compile $tests test sources"
  exit 1
fi
if ! printf '%s\n' "$cmds" | grep -q -- ' -o xdit '; then
  echo "scripts/run.sh's targets ($targets) do not link the xdit binary"
  exit 1
fi
echo "scripts/run.sh builds $targets: $(printf '%s\n' "$cmds" | grep -c -- ' -c ') compile steps, no test"
