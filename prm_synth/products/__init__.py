"""What is built on finished datasets: training a PRM, evaluating labels and PRMs."""
