// The commit a binary was built from and that commit's date, compiled in from the defines
// Package.swift sets (from PINPROXY_COMMIT and PINPROXY_COMMIT_DATE, which scripts/build-info
// exports). Each is "" when the build was not given one.
#ifndef CPINPROXY_BUILD_H
#define CPINPROXY_BUILD_H

const char *pp_build_commit(void);
const char *pp_build_commit_date(void);

#endif
