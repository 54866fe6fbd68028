package com.acme;

public class Calc {
    public static int add(int a, int b) {
        return a + b;
    }
}
