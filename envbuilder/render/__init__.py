"""Build files from a resolved stack: the format-neutral plan, the Dockerfile/Apptainer/job views of it."""
