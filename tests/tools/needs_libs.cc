// bundle_libs_test's stand-in for a bundle binary: it links oneDNN and OpenMPI, as bd_bench and distill do, and
// a library of its own dynamically, as the bundle's binaries link Tandem's.
#include <dnnl.h>
#include <mpi/mpi.h>  // Debian's multiarch path to OpenMPI's mpi.h

int needs_libs_part();

int main() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return dnnl_version()->major + needs_libs_part() + initialized > 0 ? 0 : 1;
}
