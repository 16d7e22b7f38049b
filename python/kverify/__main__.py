import sys

from kverify.cli import main

sys.exit(main())
