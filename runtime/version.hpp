#pragma once

namespace spw {

// The spillway version, "major.minor.patch".
const char* version_string();

}  // namespace spw
