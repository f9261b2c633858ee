# Build environment shared by .ci/run and a developer's shell (`. .ci/env.sh`).
# Both must see the same values: a different CC/CXX re-runs librocksdb-sys's
# build script, which is 30+ minutes of C++ on 2 cores (minutes with ccache).
#
# One target dir per checkout, outside it: /var/cache/ankusa/targets/NAME-HASH,
# NAME the checkout's folder and HASH its absolute path's. Cargo names a
# workspace crate's artifacts alike in every clone and judges freshness by file
# times, so two clones sharing a target dir could run each other's binaries;
# ccache (below) still shares RocksDB's and librdkafka's C/C++ objects between
# the checkouts. A CARGO_TARGET_DIR already set is kept.
if [ -z "${CARGO_TARGET_DIR:-}" ]; then
  ankusa_root=$(git rev-parse --show-toplevel 2>/dev/null || pwd -P)
  ankusa_hash=$(printf '%s' "$ankusa_root" | sha256sum | cut -c1-10)
  export CARGO_TARGET_DIR="/var/cache/ankusa/targets/$(basename "$ankusa_root")-$ankusa_hash"
  # The target dir records its checkout, so `.ci/run` removes it once the
  # checkout is gone (a clone that only builds leaves no orphan of several GB).
  mkdir -p "$CARGO_TARGET_DIR" 2>/dev/null && printf '%s\n' "$ankusa_root" >"$CARGO_TARGET_DIR/.checkout" 2>/dev/null || true
  unset ankusa_root ankusa_hash
fi
export CCACHE_DIR="${CCACHE_DIR:-/var/cache/ankusa/ccache}"
# RocksDB's objects are ~1 GB per build; the default 5 GB cache would evict
# them after a few builds of different profiles.
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-20G}"
if command -v ccache >/dev/null 2>&1; then
  # ccache turns a RocksDB build in a new target dir (a new checkout, a
  # build-dependency change upstream of librocksdb-sys) into minutes of cache hits.
  export CC="ccache cc" CXX="ccache c++"
fi
