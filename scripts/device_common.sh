# Sourced by the device_*.sh scripts: strict mode, $OUT, unbuffered Python, t0, and
# `install_kverify [pip args...]`, which builds and installs this checkout (log in
# $LOG_DIR/build.log; LOG_DIR defaults to $OUT).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
LOG_DIR=${LOG_DIR:-$OUT}; mkdir -p "$LOG_DIR"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
install_kverify() {
  python3 -m pip install --no-build-isolation --no-deps "$@" . > "$LOG_DIR/build.log" 2>&1 || { tail -40 "$LOG_DIR/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
}
