"""Attachments of the probe to trainers that are not written against numprobe.Probe directly."""
