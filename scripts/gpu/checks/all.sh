# help: jit, python and suite in turn: what a full check of a new tree on this host runs
for check in jit python suite; do
  echo "== $check"
  (source "checks/$check.sh")
done
