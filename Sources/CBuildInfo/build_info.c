#include "build_info.h"

// The commit: written by scripts/build-info (which every make run calls) when it changed.
#if __has_include("build_commit.h")
#include "build_commit.h"
#endif
#ifndef TABD_COMMIT
#define TABD_COMMIT "unknown"
#endif

// (#embed is C23; the target is compiled as an earlier C, where clang takes it too.)
#pragma clang diagnostic ignored "-Wc23-extensions"

// The version: the VERSION file itself, read by the compiler (C23 #embed), so that one file
// names it for every build, with or without make; a change of it rebuilds this file.
static const char version[] = {
#embed "../../VERSION"
    , 0
};

const char *tabd_build_version(void) { return version; }

const char *tabd_build_commit(void) { return TABD_COMMIT; }
