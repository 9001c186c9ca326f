#include "runtime/version.hpp"

namespace spw {

const char* version_string() { return "0.1.0"; }

}  // namespace spw
