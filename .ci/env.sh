# Build environment shared by .ci/run and a developer's shell (`. .ci/env.sh`).
# Both must see the same values: a different CC/CXX or target dir re-runs
# librocksdb-sys's build script, which is 30+ minutes of C++ on 2 cores.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/ankusa/target}"
export CCACHE_DIR="${CCACHE_DIR:-/var/cache/ankusa/ccache}"
if command -v ccache >/dev/null 2>&1; then
  # ccache turns an accidental RocksDB rebuild (a feature or build-dep change
  # upstream of librocksdb-sys) into minutes of cache hits.
  export CC="ccache cc" CXX="ccache c++"
fi
