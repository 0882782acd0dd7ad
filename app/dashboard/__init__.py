"""The dashboard: a view above every capability, merging this worker's figures with its peers'."""
