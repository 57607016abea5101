"""NoETL 2.13.1 as a differential oracle for the playbook front end (spec/12 §11): the same
playbooks run on both, their outcomes compared (`make conformance-noetl`)."""
