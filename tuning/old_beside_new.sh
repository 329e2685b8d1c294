#!/usr/bin/env bash
# The same pybp command on the code of an older commit and on this checkout, in one
# session, in the order old, new, new, old (so that a drift of the machine shows):
#   git archive REV pybp templates | tar -x -C OLD
#   tuning/old_beside_new.sh OLD LOGDIR bench --kernels alu --storage float
# Each run's output goes to LOGDIR/{old,new}-{1,2}.txt.
set -euo pipefail
old=$(cd "$1" && pwd); logs=$2; shift 2
mkdir -p "$logs"
run() {  # run NAME ROOT
    local name=$1 root=$2; shift 2
    (cd "$root" && PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" python3 -m pybp "$@") > "$logs/$name.txt" 2>&1
}
here=$(pwd)
for name in old-1 new-1 new-2 old-2; do
    root=$here; [[ $name == old-* ]] && root=$old
    echo "== $name"; run "$name" "$root" "$@"; tail -n 12 "$logs/$name.txt"
done
