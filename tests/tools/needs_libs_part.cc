// The library needs_libs links dynamically (found through its $ORIGIN-relative RUNPATH).
int needs_libs_part() { return 1; }
