#!/bin/sh
# Stands in for the executorch tests when they cannot be built; ctest reports
# exit code 77 as "skipped" (SKIP_RETURN_CODE).
echo "SKIP: executorch tests not built: $1."
echo "To run them: scripts/setup.sh (pip-installs executorch==1.5.1 into .venv), or"
echo "pip install --no-deps executorch==1.5.1 and configure with"
echo "-DCMAKE_PREFIX_PATH=<site-packages>/executorch/lib/cmake; then re-run cmake."
exit 77
