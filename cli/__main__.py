import sys

from kafkasim.cli.main import main

sys.exit(main())
