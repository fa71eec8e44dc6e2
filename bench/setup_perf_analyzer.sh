#!/usr/bin/env bash
# Build (idempotently) a separate virtual environment holding Triton's perf_analyzer 2.51.0.
#
# perf_analyzer ships inside the tritonclient==2.51.0 wheel (as bin/perf_analyzer); it gets its
# own venv so the main venv keeps its newer tritonclient (docs/FACTS.md). The binary needs
# libb64.so.0d and libcudart.so.12 even without a GPU: both are taken from the nvidia-pytriton
# wheel of the main venv (nvidia_pytriton.libs, under hashed names), else from Debian's libb64-0d
# and PyPI's nvidia-cuda-runtime-cu12. The result is the wrapper .venv-pa/bin/pa, which sets
# LD_LIBRARY_PATH and runs perf_analyzer.
#
#   bench/setup_perf_analyzer.sh          # then: .venv-pa/bin/pa --version
# Environment: PA_VENV (default .venv-pa), MAIN_VENV (default .venv), PYTHON (default python3).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${PA_VENV:-$root/.venv-pa}"
main="${MAIN_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
libs="$venv/pa-libs"

if [ -x "$venv/bin/pa" ] && "$venv/bin/pa" --version >/dev/null 2>&1; then
    echo "perf_analyzer ready: $venv/bin/pa ($("$venv/bin/pa" --version 2>&1 | head -1))"
    exit 0
fi

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
[ -x "$venv/bin/perf_analyzer" ] || "$venv/bin/python" -m pip install -q --no-deps "tritonclient==2.51.0"
mkdir -p "$libs"

# link NAME GLOB...: point $libs/NAME at the first file matching one of the globs.
link() {
    local name="$1" f
    shift
    for f in "$@"; do
        if [ -e "$f" ]; then
            ln -sf "$f" "$libs/$name"
            return 0
        fi
    done
    return 1
}

shopt -s nullglob
bundled=("$main"/lib/python3*/site-packages/nvidia_pytriton.libs)
b64=() cudart=()
for d in "${bundled[@]}"; do
    b64+=("$d"/libb64-*.so.0d*)
    cudart+=("$d"/libcudart-*.so.12*)
done
link libb64.so.0d "${b64[@]}" /usr/lib/x86_64-linux-gnu/libb64.so.0d || {
    echo "libb64.so.0d not found: install nvidia-pytriton in $main or 'apt-get install libb64-0d'" >&2
    exit 1
}
if ! link libcudart.so.12 "${cudart[@]}"; then
    "$venv/bin/python" -m pip install -q "nvidia-cuda-runtime-cu12"
    pypi=("$venv"/lib/python3*/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12)
    link libcudart.so.12 "${pypi[@]}" || { echo "libcudart.so.12 not found after pip install" >&2; exit 1; }
fi

cat >"$venv/bin/pa" <<EOF
#!/usr/bin/env bash
# perf_analyzer 2.51.0 with the libraries it needs (written by bench/setup_perf_analyzer.sh)
export LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$venv/bin/perf_analyzer" "\$@"
EOF
chmod +x "$venv/bin/pa"

missing="$(LD_LIBRARY_PATH="$libs" ldd "$venv/bin/perf_analyzer" | grep 'not found' || true)"
if [ -n "$missing" ]; then
    echo "perf_analyzer still misses libraries:" >&2
    echo "$missing" >&2
    exit 1
fi
echo "perf_analyzer ready: $venv/bin/pa ($("$venv/bin/pa" --version 2>&1 | head -1))"
