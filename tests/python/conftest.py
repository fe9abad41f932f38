"""pytest setup for tests/python: the GPU check's package (scripts/gpucheck)
is imported from the checkout."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
