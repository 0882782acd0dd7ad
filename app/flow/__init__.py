"""The main flow's glue: the subscription's batch sink that saves into the message hub and acks
batch items, and the main job that runs the whole flow (`hubstream run`)."""
