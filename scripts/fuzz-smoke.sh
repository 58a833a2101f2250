#!/usr/bin/env bash
# Builds every cargo-fuzz target under fuzz/ and runs each one, one after another, for
# FUZZ_SECONDS seconds (default 30). Exits non-zero if any target crashes or fails to build.
# CI (.ci/run) runs it with FUZZ_SECONDS=2; the long runs (10^7 executions per target) are
# by hand, recorded in docs/BENCHMARKS.md ("Fuzzing (issue 23)"):
#   cargo +nightly fuzz run TARGET -- -runs=10000000
#
#   FUZZ_SECONDS=60 scripts/fuzz-smoke.sh            # all targets
#   FUZZ_TARGETS="packet ack" scripts/fuzz-smoke.sh  # a subset
#   FUZZ_BUILD_FLAGS="--dev" scripts/fuzz-smoke.sh   # unoptimized: builds faster, runs slower
#
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz --locked`).
# Seeds are written into fuzz/corpus/<target>/ (git-ignored) by fuzz/seedgen before the runs;
# crashing inputs land in fuzz/artifacts/<target>/, logs in fuzz/target/fuzz-smoke/.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds="${FUZZ_SECONDS:-30}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
    echo "fuzz-smoke: FUZZ_SECONDS must be a positive integer, got '$seconds'" >&2
    exit 2
fi

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: cargo-fuzz or the nightly toolchain is missing;" >&2
    echo "  rustup toolchain install nightly && cargo install cargo-fuzz --locked" >&2
    exit 2
fi

read -r -a build_flags <<<"${FUZZ_BUILD_FLAGS:-}"

if [ -n "${FUZZ_TARGETS:-}" ]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
if [ "${#targets[@]}" -eq 0 ]; then
    echo "fuzz-smoke: no fuzz targets found" >&2
    exit 2
fi

echo "fuzz-smoke: writing seed inputs"
CARGO_TARGET_DIR="$root/fuzz/target/seedgen" \
    cargo run --quiet --manifest-path fuzz/seedgen/Cargo.toml -- fuzz/corpus

echo "fuzz-smoke: building ${targets[*]}"
cargo +nightly fuzz build "${build_flags[@]}"

logs="$root/fuzz/target/fuzz-smoke"
mkdir -p "$logs"
failed=()
for t in "${targets[@]}"; do
    echo "fuzz-smoke: running $t for ${seconds}s"
    log="$logs/$t.log"
    status=0
    cargo +nightly fuzz run "${build_flags[@]}" "$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1 || status=$?
    if [ "$status" -ne 0 ]; then
        echo "fuzz-smoke: $t FAILED (exit $status); log: $log" >&2
        grep -E "panicked at|ERROR: libFuzzer|SUMMARY|Test unit written to" "$log" >&2 || tail -n 40 "$log" >&2
        failed+=("$t")
    else
        done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)"
        rate="$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}' || true)"
        echo "fuzz-smoke: $t ok: ${done_line:-no DONE line} exec/s(avg): ${rate:-?}"
    fi
done

if [ "${#failed[@]}" -ne 0 ]; then
    echo "fuzz-smoke: crashes or failures in: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz-smoke: all ${#targets[@]} targets ran ${seconds}s without a crash"
