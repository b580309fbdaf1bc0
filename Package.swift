// swift-tools-version:6.0
import PackageDescription

// The commit `pinproxy --version` names and its date, from the environment scripts/build-info
// sets up (scripts/run, scripts/install.sh, scripts/package source it). Not from git here:
// SwiftPM caches this manifest across commits, so what it asked git would go stale. Without
// them the binary says "commit unknown". Only the characters a hash or a date holds are kept.
let buildInfo: [CSetting] = ["PINPROXY_COMMIT", "PINPROXY_COMMIT_DATE"].map { name in
    let value = (Context.environment[name] ?? "").filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
    return .define(name, to: "\"\(value)\"")
}

// A module sees the members of the modules it imports itself, not of every module loaded
// (SE-0444): a dependency that imports the full Foundation (TOMLKit does) would otherwise lend
// its String extensions to every file, and the binary would link Foundation and its ICU data
// (34 MB) through one `replacingOccurrences`. Sources import FoundationEssentials only.
let sourceSettings: [SwiftSetting] = [.enableUpcomingFeature("MemberImportVisibility")]

let package = Package(
    name: "pinproxy",
    products: [
        .executable(name: "pinproxy", targets: ["pinproxy"])
    ],
    // Every dependency at an exact version, swift-prometheus's own two included, so that a build
    // today and one next year compile the same code (Package.resolved is not kept).
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", exact: "1.16.2"),
        .package(url: "https://github.com/LebJe/TOMLKit", exact: "0.6.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", exact: "2.4.1"),
        .package(url: "https://github.com/apple/swift-atomics.git", exact: "1.3.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", exact: "2.13.0"),
    ],
    targets: [
        // OpenSSL 3, libevent and libnghttp2, found with pkg-config.
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        // libevent_core, not libevent_openssl: the latter's pkg-config adds -levent (core and
        // extra again, in one library) to the four the module map links, a dependency the
        // binary would carry without using a symbol of it.
        .systemLibrary(
            name: "CLibevent",
            pkgConfig: "libevent_core",
            providers: [.apt(["libevent-dev"])]
        ),
        // HTTP/2 framing and HPACK, for the in-TLS refusal to clients that chose h2.
        .systemLibrary(
            name: "CNghttp2",
            pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"])]
        ),
        // Functions for the C macros Swift cannot call.
        .target(
            name: "CPinproxyShims",
            dependencies: ["COpenSSL", "CLibevent"]
        ),
        // The build's commit and date (see buildInfo above).
        .target(
            name: "CPinproxyBuild",
            cSettings: buildInfo
        ),
        // Plain values every other module speaks in (IP and socket addresses, ALPN identifiers,
        // the ClientHello's offer, HTTP and HTTP/2 messages, file paths, deadlines, process
        // figures, a lock, a bounded cache, certificate fields, the errors and outcomes of
        // Interop's calls) and the reading of the bytes and texts the kernel gives (netlink
        // answers, /proc files): pure Swift, no C module, no I/O. Interop re-exports it.
        .target(
            name: "PinproxyCore",
            swiftSettings: sourceSettings
        ),
        // Every unsafe pointer and C call lives here: Swift types that own OpenSSL, libevent and
        // nghttp2 objects, and thin wrappers over sockets, files and processes. It decides
        // nothing: where a rule meets C (the chain check), Policy passes the rule in.
        .target(
            name: "PinproxyInterop",
            dependencies: ["PinproxyCore", "COpenSSL", "CLibevent", "CNghttp2", "CPinproxyShims", "CPinproxyBuild"],
            swiftSettings: sourceSettings
        ),
        // Every decision: the pure trust verdict (with the chain-building rules OpenSSL is asked
        // to follow), the special-purpose address table, ALPN agreement, and the config loader.
        // No sockets.
        .target(
            name: "PinproxyPolicy",
            dependencies: ["PinproxyCore", "PinproxyInterop", "TOMLKit"],
            swiftSettings: sourceSettings
        ),
        // The daemon: accept, parse CONNECT, resolve, connect, upstream TLS, intercept, relay.
        .target(
            name: "PinproxyProxy",
            dependencies: [
                "PinproxyCore", "PinproxyPolicy", "PinproxyInterop", "PinproxyService",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: sourceSettings
        ),
        // Running as a service: systemd (notify, socket activation, the journal), the admin
        // HTTP server's pages, metrics and pin-failure reports.
        .target(
            name: "PinproxyService",
            dependencies: [
                "PinproxyCore", "PinproxyInterop", "PinproxyPolicy",
                .product(name: "Prometheus", package: "swift-prometheus"),
                // Linked through Prometheus anyway; named so that their pins above apply.
                .product(name: "Atomics", package: "swift-atomics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: sourceSettings
        ),
        // The command line: run (the daemon), check, evaluate, pin, diagnose, ca, egress, ...
        .executableTarget(
            name: "pinproxy",
            dependencies: [
                "PinproxyCore", "PinproxyPolicy", "PinproxyProxy", "PinproxyInterop",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: sourceSettings
        ),
        // XCTest unit tests, one target per module (Tests/e2e holds the end-to-end tests).
        .testTarget(
            name: "PinproxyPolicyTests",
            dependencies: ["PinproxyCore", "PinproxyPolicy", "PinproxyInterop"],
            exclude: ["limbo-known-differences.txt", "bettertls-known-differences.txt", "rule-fixtures.py"]
        ),
        .testTarget(
            name: "PinproxyServiceTests",
            dependencies: ["PinproxyCore", "PinproxyService", "PinproxyInterop", "PinproxyPolicy"]
        ),
        .testTarget(
            name: "PinproxyProxyTests",
            dependencies: ["PinproxyCore", "PinproxyProxy"]
        ),
        .testTarget(
            name: "PinproxyInteropTests",
            dependencies: ["PinproxyCore", "PinproxyInterop"]
        ),
        .testTarget(
            name: "PinproxyCoreTests",
            dependencies: ["PinproxyCore"]
        ),
    ]
)

// libFuzzer targets (Fuzz/): built only by scripts/fuzz, which sets PINPROXY_FUZZ=1 and builds
// with --sanitize=fuzzer --sanitize=address. They have no main of their own (libFuzzer's is
// linked in), so a plain build must not see them.
if Context.environment["PINPROXY_FUZZ"] == "1" {
    package.targets.append(.executableTarget(
        name: "pinproxy-fuzz",
        dependencies: ["PinproxyCore", "PinproxyProxy", "PinproxyPolicy", "PinproxyInterop"],
        path: "Fuzz/Sources",
        swiftSettings: [.unsafeFlags(["-parse-as-library"])]
    ))
    package.products.append(.executable(name: "pinproxy-fuzz", targets: ["pinproxy-fuzz"]))
}
