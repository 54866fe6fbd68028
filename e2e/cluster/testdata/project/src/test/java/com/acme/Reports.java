package com.acme;

import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.runner.Description;
import org.junit.runner.JUnitCore;
import org.junit.runner.Result;
import org.junit.runner.notification.Failure;
import org.junit.runner.notification.RunListener;

/** Runs JUnit test classes and writes a JUnit XML report for each, as Gradle does. */
public class Reports {
    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);
        boolean ok = true;
        for (int i = 1; i < args.length; i++) {
            Class<?> c = Class.forName(args[i]);
            List<Description> cases = new ArrayList<>();
            List<Failure> failures = new ArrayList<>();
            JUnitCore core = new JUnitCore();
            core.addListener(new RunListener() {
                @Override public void testFinished(Description d) { cases.add(d); }
                @Override public void testFailure(Failure f) { failures.add(f); }
            });
            Result r = core.run(c);
            ok &= r.wasSuccessful();
            try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(dir.resolve("TEST-" + c.getName() + ".xml")))) {
                w.printf("<?xml version=\"1.0\" encoding=\"UTF-8\"?>%n<testsuite name=\"%s\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"0\" time=\"%.3f\">%n",
                    c.getName(), r.getRunCount(), r.getFailureCount(), r.getRunTime() / 1000.0);
                for (Description d : cases) {
                    w.printf("  <testcase name=\"%s\" classname=\"%s\" time=\"0\">%n", d.getMethodName(), c.getName());
                    for (Failure f : failures) {
                        if (f.getDescription().equals(d)) {
                            w.printf("    <failure message=\"%s\" type=\"%s\">%s</failure>%n", escape(f.getMessage()),
                                f.getException().getClass().getName(), escape(f.getTrace()));
                        }
                    }
                    w.println("  </testcase>");
                }
                w.println("</testsuite>");
            }
            System.out.printf("%s: %d run, %d failed%n", c.getName(), r.getRunCount(), r.getFailureCount());
        }
        System.exit(ok ? 0 : 1);
    }

    static String escape(String s) {
        if (s == null) return "";
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&quot;");
    }
}
