# Sourced by the device_*.sh scripts: strict mode, $OUT, unbuffered Python, t0, and
# `install_kverify [pip args...]`, which builds and installs this checkout (log in $OUT/build.log).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
install_kverify() {
  python3 -m pip install --no-build-isolation --no-deps "$@" . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
}
