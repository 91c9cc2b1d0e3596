"""The judge stage: asking the judge, choosing which rows to ask, measuring its accuracy, consensus and verification chains."""
