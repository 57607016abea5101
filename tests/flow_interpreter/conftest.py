"""The interpreter under test is the guest package `aos_flow` (modules/flow/aos_flow),
installed beside `aos_sdk` (setup.py's PACKAGE_ROOTS) so that it runs natively here under its
own name, as it does inside the component."""
