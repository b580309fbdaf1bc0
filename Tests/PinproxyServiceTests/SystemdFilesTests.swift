import Glibc
import Foundation
import XCTest

/// The unit files and the install script, checked with the real tools.
final class SystemdFilesTests: XCTestCase {
    private var serviceUnit: String { repositoryRoot + "/systemd/pinproxy.service" }
    private var socketUnit: String { repositoryRoot + "/systemd/pinproxy.socket" }
    private var egressUnit: String { repositoryRoot + "/systemd/pinproxy-egress.service" }
    private var transparentSockets: [String] { ["pinproxy-transparent.socket", "pinproxy-transparent6.socket"].map { repositoryRoot + "/systemd/" + $0 } }
    private let installedBinary = "/usr/local/bin/pinproxy"

    /// The `pinproxy` executable of this build (beside the test bundle), if built.
    private var builtPinproxy: String? {
        let executable = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
        let candidate = executable.deletingLastPathComponent().appendingPathComponent("pinproxy").path
        return FileManager.default.isExecutableFile(atPath: candidate) ? candidate : nil
    }

    private func systemdAnalyze() throws -> String {
        guard let tool = findExecutable("systemd-analyze", "/usr/bin/systemd-analyze", "/bin/systemd-analyze") else {
            throw XCTSkip("systemd-analyze is not installed (Debian package systemd): cannot verify the units")
        }
        return tool
    }

    /// `systemd-analyze verify` checks that ExecStart's binary exists, and /usr/local/bin/pinproxy
    /// is not installed on a build machine. So the units are verified as copies in a temporary
    /// directory (same file names: the socket names pinproxy.service) whose ExecStart and ExecReload point at
    /// an existing binary — the one this build made, else /bin/true — and nothing else changed.
    /// The verification must pass with no diagnostics about either unit.
    func testUnitsPassSystemdAnalyzeVerify() throws {
        let tool = try systemdAnalyze()
        let directory = try TemporaryDirectory()
        let original = try String(contentsOfFile: serviceUnit, encoding: .utf8)
        let prefix = "ExecStart=\(installedBinary) "
        XCTAssertEqual(original.components(separatedBy: "\n").filter { $0.hasPrefix(prefix) }.count, 1,
                       "ExecStart must run \(installedBinary)")
        let stand_in = builtPinproxy ?? "/bin/true"
        XCTAssertEqual(original.components(separatedBy: "\n").filter { $0.hasPrefix("ExecReload=\(installedBinary) reload ") }.count, 1,
                       "ExecReload must run \(installedBinary) reload")
        let copy = original.replacingOccurrences(of: "=\(installedBinary) ", with: "=\(stand_in) ")
        try copy.write(toFile: directory.path + "/pinproxy.service", atomically: true, encoding: .utf8)
        try FileManager.default.copyItem(atPath: socketUnit, toPath: directory.path + "/pinproxy.socket")
        for unit in transparentSockets {
            try FileManager.default.copyItem(atPath: unit, toPath: directory.path + "/" + URL(fileURLWithPath: unit).lastPathComponent)
        }
        let egress = try String(contentsOfFile: egressUnit, encoding: .utf8)
        XCTAssertEqual(egress.components(separatedBy: "\n").filter { $0.hasPrefix("Exec") && $0.contains("=\(installedBinary) egress ") }.count, 3,
                       "ExecStart, ExecReload and ExecStop must run \(installedBinary) egress")
        try egress.replacingOccurrences(of: "=\(installedBinary) ", with: "=\(stand_in) ")
            .write(toFile: directory.path + "/pinproxy-egress.service", atomically: true, encoding: .utf8)

        let result = try runProcess(tool, ["verify", "--man=no", directory.path + "/pinproxy.service",
                                           directory.path + "/pinproxy.socket", directory.path + "/pinproxy-egress.service",
                                           directory.path + "/pinproxy-transparent.socket", directory.path + "/pinproxy-transparent6.socket"])
        let diagnostics = (result.stdout + result.stderr).split(separator: "\n").filter { $0.contains("pinproxy") }
        XCTAssertEqual(result.status, 0, "systemd-analyze verify failed:\n\(result.stdout)\(result.stderr)")
        XCTAssertEqual(diagnostics, [], "systemd-analyze verify complained about the units")
    }

    /// The units as shipped: the only complaint allowed is the missing installed binary.
    func testShippedUnitsFailVerifyOnlyForTheMissingBinary() throws {
        let tool = try systemdAnalyze()
        if FileManager.default.isExecutableFile(atPath: installedBinary) {
            let result = try runProcess(tool, ["verify", "--man=no", serviceUnit, socketUnit, egressUnit])
            XCTAssertEqual(result.status, 0, result.stderr)
            return
        }
        let result = try runProcess(tool, ["verify", "--man=no", serviceUnit, socketUnit, egressUnit])
        let lines = (result.stdout + result.stderr).split(separator: "\n").map(String.init)
        XCTAssertFalse(lines.isEmpty, "expected the missing \(installedBinary) to be reported")
        for line in lines {
            XCTAssertTrue(line.contains(installedBinary), "unexpected systemd-analyze diagnostic: \(line)")
        }
    }

    func testServiceUnitSettings() throws {
        let text = try String(contentsOfFile: serviceUnit, encoding: .utf8)
        let settings = Set(text.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") && $0.contains("=") })
        for required in [
            "Type=notify",
            "ExecStart=/usr/local/bin/pinproxy run --config /etc/pinproxy/pinproxy.toml",
            "ExecReload=/usr/local/bin/pinproxy reload --config /etc/pinproxy/pinproxy.toml --pid $MAINPID --restart-pending-ok",
            "RuntimeDirectory=pinproxy",
            "StateDirectory=pinproxy", "ConfigurationDirectory=pinproxy", "LogsDirectory=pinproxy", "User=pinproxy", "Group=pinproxy",
            "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
            "PrivateDevices=yes", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK", "CapabilityBoundingSet=",
            "SystemCallFilter=@system-service", "LimitNOFILE=65536", "Restart=on-failure", "WatchdogSec=30s",
        ] {
            XCTAssertTrue(settings.contains(required), "pinproxy.service lacks \(required)")
        }
        // A static user: a dynamic one's uid can change at restart, and the egress lock exempts by uid.
        XCTAssertFalse(settings.contains { $0.hasPrefix("DynamicUser=") }, "pinproxy.service must not use DynamicUser=")
        let socket = try String(contentsOfFile: socketUnit, encoding: .utf8)
        XCTAssertTrue(socket.contains("\nListenStream=127.0.0.1:3128\n"))
    }

    /// Under ProtectSystem=strict only the unit's own directories are writable: the `report_to`
    /// file the shipped config and docs/logs-and-metrics.md show must be in its LogsDirectory.
    func testTheExampleReportFileIsInTheUnitsLogsDirectory() throws {
        let unit = try String(contentsOfFile: serviceUnit, encoding: .utf8)
        let logs = unit.split(separator: "\n").filter { $0.hasPrefix("LogsDirectory=") }
        XCTAssertEqual(logs, ["LogsDirectory=pinproxy"])
        for document in ["/config/pinproxy.toml", "/docs/logs-and-metrics.md"] {
            let text = try String(contentsOfFile: repositoryRoot + document, encoding: .utf8)
            let paths = text.components(separatedBy: "\"file:").dropFirst().map { $0.prefix { $0 != "\"" } }
                .filter { $0.hasPrefix("/") }
            XCTAssertFalse(paths.isEmpty, "\(document) shows no absolute report_to file")
            for path in paths {
                XCTAssertTrue(path.hasPrefix("/var/log/pinproxy/"), "\(document): \(path) is outside LogsDirectory=pinproxy")
            }
        }
    }

    /// The egress lock: a oneshot that applies on start and removes on stop, ordered after
    /// pinproxy and not bound to it (restarting pinproxy leaves the lock on: fail closed).
    func testEgressUnitSettings() throws {
        let text = try String(contentsOfFile: egressUnit, encoding: .utf8)
        let settings = text.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") && $0.contains("=") }
        for required in [
            "Type=oneshot", "RemainAfterExit=yes", "After=pinproxy.service",
            "ExecStart=/usr/local/bin/pinproxy egress apply --config /etc/pinproxy/pinproxy.toml",
            "ExecStop=/usr/local/bin/pinproxy egress remove --config /etc/pinproxy/pinproxy.toml",
            "CapabilityBoundingSet=CAP_NET_ADMIN", "WantedBy=multi-user.target",
        ] {
            XCTAssertTrue(settings.contains(required), "pinproxy-egress.service lacks \(required)")
        }
        for forbidden in ["PartOf=", "BindsTo=", "Requires=", "User=", "DynamicUser="] {
            XCTAssertFalse(settings.contains { $0.hasPrefix(forbidden) }, "pinproxy-egress.service must not set \(forbidden)")
        }
    }

    /// The transparent listeners: one socket unit per family (one address that cannot be bound
    /// fails a whole socket unit), on the privileged port 8, named "transparent" for pinproxy,
    /// never joinable (no ReusePort=); the service itself holds no capability to bind it.
    func testTransparentSocketUnits() throws {
        for (unit, address) in zip(transparentSockets, ["127.0.0.1:8", "[::1]:8"]) {
            let settings = try String(contentsOfFile: unit, encoding: .utf8).split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") && $0.contains("=") }
            XCTAssertEqual(settings.filter { $0.hasPrefix("ListenStream=") }, ["ListenStream=\(address)"], unit)
            for required in ["FileDescriptorName=transparent", "Service=pinproxy.service", "WantedBy=sockets.target"] {
                XCTAssertTrue(settings.contains(required), "\(unit) lacks \(required)")
            }
            XCTAssertFalse(settings.contains { $0.hasPrefix("ReusePort=") }, "\(unit) must not set ReusePort=")
        }
        let service = try String(contentsOfFile: serviceUnit, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertTrue(service.contains("CapabilityBoundingSet="), "pinproxy.service must drop every capability")
        XCTAssertEqual(service.filter { $0.hasPrefix("AmbientCapabilities=") }, ["AmbientCapabilities="])
        let egress = try String(contentsOfFile: egressUnit, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertTrue(egress.contains("Wants=pinproxy-transparent.socket pinproxy-transparent6.socket"))
    }

    /// scripts/install.sh into a staging DESTDIR, with this build's binary (no release build,
    /// no root, nothing outside the temporary directory touched); then again, keeping the config.
    func testInstallScriptStagesIntoDestdir() throws {
        let stage = try TemporaryDirectory()
        let binary = builtPinproxy ?? "/bin/true"
        var environment = ProcessInfo.processInfo.environment
        environment["DESTDIR"] = stage.path
        environment["PINPROXY_BINARY"] = binary
        environment.removeValue(forKey: "PREFIX")

        let first = try runProcess("/bin/sh", [repositoryRoot + "/scripts/install.sh"], environment: environment)
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertTrue(first.stdout.contains("systemctl daemon-reload && systemctl enable --now pinproxy"), first.stdout)

        let files = FileManager.default
        let installed = stage.path + "/usr/local/bin/pinproxy"
        XCTAssertTrue(files.isExecutableFile(atPath: installed))
        XCTAssertEqual(files.contents(atPath: installed), files.contents(atPath: binary))
        XCTAssertEqual(files.contents(atPath: stage.path + "/etc/systemd/system/pinproxy.service"),
                       files.contents(atPath: serviceUnit))
        XCTAssertEqual(files.contents(atPath: stage.path + "/etc/systemd/system/pinproxy.socket"),
                       files.contents(atPath: socketUnit))
        XCTAssertEqual(files.contents(atPath: stage.path + "/etc/systemd/system/pinproxy-egress.service"),
                       files.contents(atPath: egressUnit))
        // Under DESTDIR no user is created: the command to create it is printed.
        XCTAssertTrue(first.stdout.contains("useradd --system --user-group --home-dir /var/lib/pinproxy --no-create-home --shell /usr/sbin/nologin pinproxy"), first.stdout)
        let config = stage.path + "/etc/pinproxy/pinproxy.toml"
        XCTAssertEqual(files.contents(atPath: config), files.contents(atPath: repositoryRoot + "/config/pinproxy.toml"))
        let mode = try XCTUnwrap(files.attributesOfItem(atPath: stage.path + "/etc/systemd/system/pinproxy.service")[.posixPermissions] as? Int)
        XCTAssertEqual(mode, 0o644)

        // A second run keeps an edited config.
        try "# edited\n".write(toFile: config, atomically: true, encoding: .utf8)
        let second = try runProcess("/bin/sh", [repositoryRoot + "/scripts/install.sh"], environment: environment)
        XCTAssertEqual(second.status, 0, second.stderr)
        XCTAssertTrue(second.stdout.contains("keeping existing"), second.stdout)
        XCTAssertEqual(try String(contentsOfFile: config, encoding: .utf8), "# edited\n")

        // PREFIX moves the binary and ExecStart with it.
        let other = try TemporaryDirectory()
        environment["DESTDIR"] = other.path
        environment["PREFIX"] = "/opt/pinproxy"
        let third = try runProcess("/bin/sh", [repositoryRoot + "/scripts/install.sh"], environment: environment)
        XCTAssertEqual(third.status, 0, third.stderr)
        XCTAssertTrue(files.isExecutableFile(atPath: other.path + "/opt/pinproxy/bin/pinproxy"))
        let unit = try String(contentsOfFile: other.path + "/etc/systemd/system/pinproxy.service", encoding: .utf8)
        XCTAssertTrue(unit.contains("\nExecStart=/opt/pinproxy/bin/pinproxy run --config /etc/pinproxy/pinproxy.toml\n"))
        let egress = try String(contentsOfFile: other.path + "/etc/systemd/system/pinproxy-egress.service", encoding: .utf8)
        XCTAssertTrue(egress.contains("\nExecStart=/opt/pinproxy/bin/pinproxy egress apply --config /etc/pinproxy/pinproxy.toml\n"), egress)
        XCTAssertTrue(egress.contains("\nExecStop=/opt/pinproxy/bin/pinproxy egress remove --config /etc/pinproxy/pinproxy.toml\n"), egress)
        XCTAssertFalse(egress.contains("=/usr/local/bin/pinproxy"), egress)
    }
}
