import Foundation
import Glibc
import PinproxyCore
import PinproxyInterop
import PinproxyPolicy

/// The cgroup walk on hostile names: a delegated unit names the cgroups of its own subtree as
/// it likes. The input is a list of paths (NUL between them, `/` between names; a name is any
/// other bytes, `.` and `..` dropped), made as directories under a scratch root; then
/// `CgroupTree.walk` and `CgroupUnit.of` must agree with what was made: every directory met
/// once with its exact bytes and inode, the one looked for found, and its unit the one an
/// independent reading of its path gives.
enum CgroupsTarget {
    static let scratch: String = {
        let path = NSTemporaryDirectory() + "pinproxy-fuzz-cgroups-\(getpid())"
        mkdir(path, 0o700)
        return path
    }()

    static func run(_ input: [UInt8]) {
        let root = Array(scratch.utf8)
        var made: [[UInt8]: UInt64] = [:]
        var order: [[UInt8]] = []
        defer { removeChildren(of: root) }
        for record in input.split(separator: 0, omittingEmptySubsequences: true).prefix(48) {
            var path: [UInt8] = []
            for name in record.split(separator: UInt8(ascii: "/")).prefix(40) {
                let name = Array(name.prefix(255))
                guard name != [0x2E], name != [0x2E, 0x2E] else { continue }
                guard root.count + path.count + 1 + name.count < 4000 else { break }
                path += [UInt8(ascii: "/")] + name
                if made[path] != nil { continue }
                var info = stat()
                var status: Int32 = -1
                withPath(root + path) { full in
                    guard mkdir(full, 0o700) == 0 || errno == EEXIST else { return }
                    status = stat(full, &info)
                }
                guard status == 0 else { break }
                made[path] = UInt64(info.st_ino)
                order.append(path)
            }
        }
        var rootInfo = stat()
        fuzzCheck(stat(scratch, &rootInfo) == 0, "the scratch root is gone")
        made[[UInt8(ascii: "/")]] = UInt64(rootInfo.st_ino)

        // A walk for an id that exists nowhere meets every directory once, with its bytes and inode.
        let full = CgroupTree.walk(root: scratch, first: "/system.slice", until: 0, limit: 100_000)
        fuzzCheck(full.end == .complete && full.gap == nil, "full walk ended \(full.end), gap \(String(describing: full.gap))")
        var seen: [[UInt8]: UInt64] = [:]
        for cgroup in full.cgroups {
            fuzzCheck(seen.updateValue(cgroup.id, forKey: cgroup.path.bytes) == nil, "\(cgroup.path) met twice")
        }
        fuzzCheck(seen == made, "the walk met \(seen.count) directories, \(made.count) were made")
        if case .unknown = CgroupUnit.of(cgroup: 0, after: full) {} else { fuzzCheck(false, "an id that exists nowhere has a unit") }

        // Each of a few made directories is found, and its unit is what its path says.
        for path in [order.first, order.last, order.dropFirst(order.count / 2).first].compactMap({ $0 }) {
            let id = made[path]!
            let walk = CgroupTree.walk(root: scratch, first: "/system.slice", until: id, limit: 100_000)
            fuzzCheck(walk.end == .found && walk.cgroups.last?.path.bytes == path, "\(FilePathBytes(bytes: path)) not found")
            let expected = expectedUnit(path).map(CgroupUnit.unit) ?? .noUnit
            let answer = CgroupUnit.of(cgroup: id, after: walk)
            fuzzCheck(answer == expected, "\(FilePathBytes(bytes: path)): \(answer), expected \(expected)")
        }
    }

    /// The unit rule read independently: below `/system.slice`, past any `*.slice`, the first
    /// other name, when it is a service name systemd allows.
    static func expectedUnit(_ path: [UInt8]) -> String? {
        let names = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        guard names.count >= 3, names[0].isEmpty, Array(names[1]) == Array("system.slice".utf8) else { return nil }
        for name in names.dropFirst(2) {
            let bytes = Array(name)
            if bytes.count > 6, Array(bytes.suffix(6)) == Array(".slice".utf8), String(validating: bytes, as: UTF8.self) != nil { continue }
            let suffix = Array(".service".utf8)
            guard bytes.count > suffix.count, bytes.count <= 255, Array(bytes.suffix(suffix.count)) == suffix else { return nil }
            let stem = bytes.dropLast(suffix.count)
            guard stem.first != UInt8(ascii: "@") else { return nil }
            let allowed = Set(Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_.\\@".utf8))
            return stem.allSatisfy(allowed.contains) ? String(decoding: bytes, as: UTF8.self) : nil
        }
        return nil
    }

    /// Removes every directory below `root`, depth first, by bytes.
    static func removeChildren(of root: [UInt8]) {
        withPath(root) { path in
            guard let handle = opendir(path) else { return }
            var children: [[UInt8]] = []
            while let entry = readdir(handle) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
                if name != [0x2E], name != [0x2E, 0x2E] { children.append(root + [UInt8(ascii: "/")] + name) }
            }
            closedir(handle)
            for child in children {
                removeChildren(of: child)
                withPath(child) { _ = rmdir($0) }
            }
        }
    }

    static func withPath(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> Void) {
        (bytes + [0]).withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
        }
    }
}
