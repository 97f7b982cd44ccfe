"""`python -m benchmarks.data_value`: the benchmark's main half (`measure`)."""

import sys

from benchmarks.data_value.measure import main

sys.exit(main())
