#!/usr/bin/env bash
# Multi-host jobs on real separate hosts: three network namespaces joined by a bridge, the
# coordinator in the root namespace. Runs one BSP job locally, through the ssh launcher (a
# netns stand-in for ssh) and through Open MPI's mpirun across the hosts, and requires the
# trained parameters (params.tsv) to be byte-identical; a server SIGKILLed on its host is
# restarted there (--max-restarts) and the job ends with the same parameters. Then, on CURVE (the default off
# loopback): strangers (plaintext, and another job's key) hammer a server under a worker's id,
# and a node's own key speaks as another node to the coordinator, while a job runs, and the job
# must finish; a host's link is cut, and the node on it must be
# named within the heartbeat timeout; a world of the wrong size (mpirun -np 3 for a job of 4)
# must fail within seconds, naming both sizes.
# Skips (exit 77) where the machine cannot make network namespaces or has no mpirun.
# Usage: scripts/test-multihost.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: test-multihost.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=testenv/netns-hosts.sh
source "$root/scripts/testenv/netns-hosts.sh"
# shellcheck source=testenv/torch-job.sh
source "$root/scripts/testenv/torch-job.sh"
if ! reason=$(netns_can_run); then
  echo "SKIP: $reason"
  exit 77
fi
if ! command -v mpirun >/dev/null; then
  echo "SKIP: no mpirun (scripts/install-deps.sh --for-tests installs openmpi-bin)"
  exit 77
fi

P=slmh
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  netns_hosts_down "$P"
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
step() { echo "== $*"; }
fail() {
  echo "test-multihost: FAIL: $*" >&2
  for f in "$tmp"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -25 "$f" >&2; }; done
  exit 1
}

netns_hosts_up "$P" 3 || fail "could not make the network-namespace hosts"
cidr=$(netns_subnet_cidr)
rsh="$tmp/rsh"
netns_write_rsh "$rsh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
launch="$build/bin/syncline-launch"
hosts=("--hosts" "${P}1:2,${P}2,${P}3" "--rsh" "$rsh" "--coordinator-interface" "${P}br")
mpi_args="--mca oob_tcp_if_include $cidr --mca btl_tcp_if_include $cidr"
common=(--servers 2 --workers 2 --sync bsp --gen-test-rows 1000 --seed 11)
job=("${common[@]}" --epochs 2 --gen-rows 6000)
# About 10 s of training: time for strangers and for cutting a link.
slow=("${common[@]}" --epochs 10 --gen-rows 12000 --min-step-ms 50)
cd "$tmp"

step "local launch (the reference)"
timeout 120 "$launch" "${job[@]}" --out "$tmp/local" >"$tmp/local.log" 2>&1 || fail "local job failed"

step "ssh launch across 3 hosts, keyed (a key of its own per node)"
timeout 120 "$launch" "${job[@]}" --launcher ssh "${hosts[@]}" --out "$tmp/ssh" \
  >"$tmp/ssh.log" 2>&1 || fail "ssh job failed"
grep -q "keys of their own in $tmp/ssh/keys" "$tmp/ssh.log" ||
  fail "the ssh job's nodes did not get keys of their own"
for node in ps0 ps1 w0 w1; do
  grep -q "^node $node\$" "$tmp/ssh/keys/$node.key" || fail "no key of $node's own"
done
[ "$(stat -c %a "$tmp/ssh/job.key")" = 600 ] || fail "job.key is not mode 600"
for i in 1 2 3; do
  grep -qh "listening at tcp://$(netns_host_ip "$P" "$i"):" "$tmp"/ssh/logs/*.log ||
    fail "no node listened on host $i's address"
done
cmp "$tmp/local/params.tsv" "$tmp/ssh/params.tsv" || fail "ssh params.tsv differs from local"

step "mpirun launch across 2 hosts, CURVE"
timeout 120 "$launch" "${job[@]}" --launcher mpirun --hosts "${P}1:2,${P}2:2" --rsh "$rsh" \
  --coordinator-interface "${P}br" --launcher-args "$mpi_args" --out "$tmp/mpi" \
  >"$tmp/mpi.log" 2>&1 || fail "mpirun job failed"
for n in ps0 ps1 w0 w1; do
  [ -s "$tmp/mpi/logs/$n.log" ] || fail "mpirun's output for $n did not reach logs/$n.log"
done
cmp "$tmp/local/params.tsv" "$tmp/mpi/params.tsv" || fail "mpirun params.tsv differs from local"

step "a server killed on its host is restarted there in place (ssh, CURVE): the model is exact"
rjob=("${common[@]}" --epochs 4 --gen-rows 6000 --checkpoint-every 10)
timeout 120 "$launch" "${rjob[@]}" --out "$tmp/restart-ref" >"$tmp/restart-ref.log" 2>&1 ||
  fail "local job (the restart's reference) failed"
"$launch" "${rjob[@]}" --min-step-ms 20 --max-restarts 1 --launcher ssh "${hosts[@]}" \
  --out "$tmp/restart" >"$tmp/restart.log" 2>&1 &
launcher=$!
pids+=("$launcher")
for _ in $(seq 300); do
  grep -q "checkpoint 10 complete" "$tmp/restart.log" 2>/dev/null && break
  sleep 0.05
done
grep -q "checkpoint 10 complete" "$tmp/restart.log" || fail "the job never completed checkpoint 10"
# This job's ps1 only (its coordinator's address), never another job's on the machine.
coordinator=$(sed -n 's/^coordinator \(tcp:[^,]*\), nodes by .*/\1/p' "$tmp/restart.log" | head -1)
[ -n "$coordinator" ] || fail "the launcher did not say where its coordinator is"
pkill -9 -f "syncline-ps --coordinator ${coordinator//./\\.} --rank 1$" ||
  fail "ps1 (host 2) was not running"
wait "$launcher" || fail "the job did not survive a restarted server"
grep -q "every node has restored checkpoint" "$tmp/restart.log" || fail "the job did not roll back"
grep -q "ps1 (pid [0-9]* on [^)]*$(netns_host_ip "$P" 2).*registered as a replacement" \
  "$tmp/restart.log" || fail "ps1's replacement did not register from host 2"
cmp "$tmp/restart-ref/params.tsv" "$tmp/restart/params.tsv" ||
  fail "params.tsv after the restart differs from the run without one"
echo "   $(grep -o 'every node has restored .*' "$tmp/restart.log" | head -1)"

step "keyed all-reduce across hosts (hierarchical, w0 and w3 share host 1, sealed TCP plane) trains the BSP model"
ar=(--workers 4 --gen-test-rows 1000 --seed 11 --epochs 2 --gen-rows 6000)
timeout 120 "$launch" "${ar[@]}" --sync bsp --servers 2 --out "$tmp/ar-bsp" >"$tmp/ar-bsp.log" 2>&1 ||
  fail "local bsp job (4 workers) failed"
timeout 120 "$launch" "${ar[@]}" --sync allreduce:hier --launcher ssh "${hosts[@]}" \
  --out "$tmp/ar-hier" >"$tmp/ar-hier.log" 2>&1 || fail "all-reduce job across hosts failed"
# Off loopback the job is keyed, so its collectives take the sealed TCP plane, not CURVE.
for w in 0 1 2 3; do
  grep -q "collectives over sealed TCP" "$tmp/ar-hier/logs/w$w.log" ||
    fail "w$w's collectives did not take the sealed TCP plane"
done
python3 - "$tmp/ar-bsp/params.tsv" "$tmp/ar-hier/params.tsv" <<'PY' || fail "all-reduce params differ from bsp"
import sys
def load(p):
    return {l.split("\t")[0]: [float(x) for x in l.split("\t")[1:]]
            for l in open(p) if not l.startswith("#")}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), "different keys"
# Relative, with a floor of 0.01: parameters near 1e-3 differ by ~1e-8 (float32 sums in
# another order, through Adagrad's accumulators), which is no difference of the model.
worst = max(abs(x - y) / max(abs(x), 1e-2) for k in a for x, y in zip(a[k], b[k]))
print(f"   worst relative difference {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY

# Waits (bounded) until node $2 of run folder $1 has logged its address, and prints it.
address_of() {
  for _ in $(seq 300); do
    a=$(grep -ho "$2 on [^ ]* listening at tcp://[0-9.:]*" "$1/logs/$2.log" 2>/dev/null |
      sed 's/.* at //') || true
    [ -n "${a:-}" ] && { echo "$a"; return 0; }
    sleep 0.05
  done
  return 1
}

step "PyTorch workers (syncline.torch, syncline-launch -- COMMAND) over ssh and mpirun: the local model"
if torch_can_run; then
  read -r -a torch_job <<<"$(torch_job_args)"
  export PYTHONPATH="$build/python"
  timeout 120 "$launch" --out "$tmp/torch-local" "${torch_job[@]}" >"$tmp/torch-local.log" 2>&1 ||
    fail "local PyTorch job failed"
  timeout 120 "$launch" --launcher ssh "${hosts[@]}" --out "$tmp/torch-ssh" "${torch_job[@]}" \
    >"$tmp/torch-ssh.log" 2>&1 || fail "PyTorch job over ssh failed"
  timeout 120 "$launch" --launcher mpirun --hosts "${P}1:2,${P}2:2" --rsh "$rsh" \
    --coordinator-interface "${P}br" --launcher-args "$mpi_args" --out "$tmp/torch-mpi" \
    "${torch_job[@]}" >"$tmp/torch-mpi.log" 2>&1 || fail "PyTorch job under mpirun failed"
  unset PYTHONPATH
  grep -qh "w1 on [^ ]* listening at tcp://$(netns_host_ip "$P" 1):" "$tmp"/torch-ssh/logs/w1.log ||
    fail "the ssh PyTorch job's w1 did not run on host 1"
  for run in torch-ssh torch-mpi; do
    [ "$(torch_result "$tmp/torch-local")" = "$(torch_result "$tmp/$run")" ] ||
      fail "$run's model differs from the local one"
  done
fi

step "strangers under a worker's id: no key, another job's key, the server's public key"
"$launch" "${slow[@]}" --launcher ssh "${hosts[@]}" --out "$tmp/guarded" \
  >"$tmp/guarded.log" 2>&1 &
launcher=$!
pids+=("$launcher")
ps0=$(address_of "$tmp/guarded" ps0) || fail "ps0 never listened"
echo "   ps0 at $ps0 ($(date +%T.%N))"
# One that knows the server's public key gets as far as the ZAP handler, which refuses it.
"$build/tests/syncline-stranger" "$ps0" w0 1 "$tmp/ssh/job.key" "$tmp/guarded/job.key" \
  >"$tmp/stranger-zap.log" 2>&1 || fail "stranger (server's public key) did not run"
"$build/tests/syncline-stranger" "$ps0" w0 1 >"$tmp/stranger-plain.log" 2>&1 ||
  fail "stranger (plaintext) did not run"
"$build/tests/syncline-stranger" "$ps0" w0 1 "$tmp/ssh/job.key" >"$tmp/stranger-key.log" 2>&1 ||
  fail "stranger (another job's key) did not run"
# ps0's data endpoint is on the sealed data path (no CURVE): the CURVE strangers fail at the
# greeting, a plaintext one under a live worker's id is dropped by ZeroMQ, and one under an id
# nobody holds is heard, and its pushes refused by name.
"$build/tests/syncline-stranger" "$ps0" w7 1 >"$tmp/stranger-free-id.log" 2>&1 ||
  fail "stranger (plaintext, a free id) did not run"
# An insider: w0's own key (per-node keys, the default) speaking to the coordinator as another
# node's control endpoint. As live w1's, its connection is refused (a live name is never
# handed over) and w1 trains on; as w5's, a name nobody holds, it connects (its key is the
# job's), and every message is dropped, since the key was made for w0.
coordinator=$(grep -o 'coordinator tcp://[^,]*' "$tmp/guarded.log" | head -1 | cut -d' ' -f2)
[ -n "$coordinator" ] || fail "the guarded job did not say where its coordinator is"
[ -f "$tmp/guarded/keys/w0.key" ] || fail "the guarded job's nodes have no keys of their own"
"$build/tests/syncline-stranger" "$coordinator" w1.ctl 1 "$tmp/guarded/keys/w0.key" "" \
  coordinator >"$tmp/stranger-insider.log" 2>&1 || fail "stranger (w0's key as w1) did not run"
"$build/tests/syncline-stranger" "$coordinator" w5.ctl 1 "$tmp/guarded/keys/w0.key" "" \
  coordinator >"$tmp/stranger-insider-free.log" 2>&1 || fail "stranger (w0's key as w5) did not run"
echo "   strangers done ($(date +%T.%N))"
kill -0 "$launcher" 2>/dev/null || fail "the job ended before the strangers were done: make it longer"
wait "$launcher" || fail "the job with strangers about failed"
grep -qE "refused a CURVE connection|refused a message from 'w7'" "$tmp/guarded/logs/ps0.log" ||
  fail "ps0 did not log refusing the strangers"
grep -q "dropped a message under the id 'w5.ctl' from a connection authenticated as 'w0.ctl'" \
  "$tmp/guarded.log" || fail "the coordinator did not drop w0's key speaking as w5"
grep -q "0 rejected" "$tmp/guarded/logs/ps0.log" ||
  fail "ps0 rejected requests: a stranger's push got through to the request handler"

step "a cut link is named within the heartbeat timeout"
"$launch" "${slow[@]}" --heartbeat-timeout 2 --launcher ssh "${hosts[@]}" \
  --out "$tmp/cut" >"$tmp/cut.log" 2>&1 &
launcher=$!
pids+=("$launcher")
address_of "$tmp/cut" w0 >/dev/null || fail "w0 never listened"
sleep 1
ip link set "${P}v3" down # host 3 holds w0 (placement: ps0 h1, ps1 h2, w0 h3, w1 h1)
cut_at=$(date +%s.%N)
rc=0
wait "$launcher" || rc=$?
took=$(echo "$(date +%s.%N) - $cut_at" | bc)
ip link set "${P}v3" up
[ "$rc" -ne 0 ] || fail "the job went on without a host"
grep -q "w0 (pid [0-9]* on [^)]*$(netns_host_ip "$P" 3)" "$tmp/cut.log" ||
  fail "the failure does not name w0 on host 3"
echo "   named after ${took}s: $(grep -o 'job failed: .*' "$tmp/cut.log" | head -1)"
[ "$(echo "$took < 8" | bc)" = 1 ] || fail "took ${took}s to notice the cut (heartbeat timeout 2s)"

step "a world of the wrong size fails fast"
"$launch" "${job[@]}" --external-workers --launcher ssh "${hosts[@]}" --out "$tmp/world" \
  >"$tmp/world.log" 2>&1 &
launcher=$!
pids+=("$launcher")
for _ in $(seq 200); do
  [ -s "$tmp/world/coordinator.address" ] && break
  sleep 0.05
done
coordinator=$(cat "$tmp/world/coordinator.address")
printf '%s slots=2\n%s slots=2\n' "${P}1" "${P}2" >"$tmp/hostfile"
start=$(date +%s.%N)
timeout 60 mpirun --hostfile "$tmp/hostfile" -np 3 --map-by node --mca plm_rsh_agent "$rsh" \
  --mca plm_rsh_no_tree_spawn 1 $mpi_args "$build/bin/syncline-node" --servers 2 \
  --coordinator "$coordinator" --key-file "$tmp/world/job.key" >"$tmp/world-mpirun.log" 2>&1 || true
rc=0
timeout 30 tail --pid="$launcher" -f /dev/null || true
wait "$launcher" || rc=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
[ "$rc" -ne 0 ] || fail "a world of 3 ranks ran a job of 4 nodes"
grep -q "started as one of 3 ranks, but this job has 4 nodes" "$tmp/world.log" ||
  fail "the failure does not name both world sizes"
echo "   refused after ${took}s: $(grep -o 'job failed: .*' "$tmp/world.log" | head -1)"
[ "$(echo "$took < 20" | bc)" = 1 ] || fail "took ${took}s to refuse the world"

echo "test-multihost: ok"
