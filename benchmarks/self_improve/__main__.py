"""`python -m benchmarks.self_improve [--quick]`."""

import sys

from benchmarks.self_improve.main import main

sys.exit(main())
