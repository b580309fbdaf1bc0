import Foundation

/// libFuzzer's entry points. One binary holds every target; `PINPROXY_FUZZ_TARGET` picks the
/// one to run (scripts/fuzz sets it), and `PINPROXY_FUZZ_DATA` names the directory of fixed
/// certificates and configs the targets load once (Fuzz/data).
enum FuzzTarget: String, CaseIterable {
    case connect, config, certificates, verdict, http2, cgroups, ctloglist

    static let selected: FuzzTarget = {
        let name = ProcessInfo.processInfo.environment["PINPROXY_FUZZ_TARGET"] ?? ""
        guard let target = FuzzTarget(rawValue: name) else {
            let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
            FileHandle.standardError.write(Data("PINPROXY_FUZZ_TARGET must be one of: \(names) (got \"\(name)\")\n".utf8))
            exit(2)
        }
        return target
    }()

    static let dataDirectory: String = {
        guard let directory = ProcessInfo.processInfo.environment["PINPROXY_FUZZ_DATA"] else {
            FileHandle.standardError.write(Data("PINPROXY_FUZZ_DATA must name the Fuzz/data directory\n".utf8))
            exit(2)
        }
        return directory
    }()

    func run(_ input: [UInt8]) {
        switch self {
        case .connect: ConnectTarget.run(input)
        case .config: ConfigTarget.run(input)
        case .certificates: CertificatesTarget.run(input)
        case .verdict: VerdictTarget.run(input)
        case .http2: HTTP2Target.run(input)
        case .cgroups: CgroupsTarget.run(input)
        case .ctloglist: CTLogListTarget.run(input)
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    FuzzTarget.selected.run(input)
    return 0
}

/// Stops the run with a message libFuzzer reports as a crash (and saves the input for).
func fuzzCheck(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() {
        FileHandle.standardError.write(Data("fuzz invariant broken: \(message())\n".utf8))
        abort()
    }
}
