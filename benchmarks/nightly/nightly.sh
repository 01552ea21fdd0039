#!/usr/bin/env bash
# xmfu nightly from cron: run the nightly suite on this machine's devices, append to the history store,
# publish the history page and the ROCm/CUDA gap, and exit as the suite did (1: a regression or a lost
# coverage cell; 3: not judged, the night's rows contended or not validly timed; 2: bad settings; 130:
# interrupted). One run at a time (flock).
#
#   crontab -e
#   30 2 * * * XMFU_STORE=/shared/xmfu/history XMFU_PUBLISH=/var/www/xmfu /opt/xmfu/benchmarks/nightly/nightly.sh >> /var/log/xmfu-nightly.log 2>&1
#
# Settings (environment): XMFU_STORE (required: the history store, shared by the CUDA and the ROCm machine),
# XMFU_RESULTS (bundles; default /tmp/xmfu-nightly), XMFU_PUBLISH (where the pages go; default
# $XMFU_STORE/../pages), XMFU (the xmfu command; default `xmfu`), XMFU_EXTRA (more overrides, e.g. price=2.5;
# suite.not_judged_fails=false on a shared machine whose contended nights should exit 0, not 3).
set -euo pipefail

: "${XMFU_STORE:?set XMFU_STORE to the history store folder}"
XMFU=${XMFU:-xmfu}
RESULTS=${XMFU_RESULTS:-/tmp/xmfu-nightly}
PUBLISH=${XMFU_PUBLISH:-$(dirname "$XMFU_STORE")/pages}
mkdir -p "$RESULTS" "$PUBLISH"

exec 9>"$RESULTS/.nightly.lock"
if ! flock -n 9; then
  echo "xmfu nightly: another run holds $RESULTS/.nightly.lock; not starting a second one" >&2
  exit 1
fi

status=0
# shellcheck disable=SC2086  # XMFU_EXTRA is a list of overrides
$XMFU run experiment=nightly "store=$XMFU_STORE" "results_dir=$RESULTS" ${XMFU_EXTRA:-} || status=$?

# The pages are published whatever the night's verdict: a regression is exactly when someone looks.
$XMFU history report --store "$XMFU_STORE" -o "$PUBLISH/index.html" || true
# The gap needs both platforms in the store; until then `history trend` says there is nothing to plot.
$XMFU history trend --store "$XMFU_STORE" --gap rocm cuda --metric tflops -o "$PUBLISH/gap.html" || true
echo "xmfu nightly: exit $status; pages in $PUBLISH"
exit "$status"
