"""Walk-throughs of the source documents on real data (scripts behind `dpkit walkthrough`)."""
