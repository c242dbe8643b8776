import sys

from kafkasim.cli.entry import main

sys.exit(main())
