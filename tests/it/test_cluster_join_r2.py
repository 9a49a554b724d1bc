"""Join then leave under load with R=2 (replicas 2 in the membership): the
scenario of test_cluster_join_r1.py, every owner of every key swept."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cluster_join_r1 as jl  # noqa: E402

if __name__ == "__main__":
    jl.main(2)
