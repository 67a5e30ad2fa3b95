#ifndef TABD_BUILD_INFO_H
#define TABD_BUILD_INFO_H

/// The checkout's VERSION file as it was when tabd was built (its bytes, line feed and all).
const char *tabd_build_version(void);

/// The commit tabd was built from (`make` writes it into build_commit.h beside this
/// target's source, `-dirty` when files differed from it), or "unknown" (a build without make).
const char *tabd_build_commit(void);

#endif
